#include "arrow_rows.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <new>

#include "codec.h"
#include "prefetch.h"

namespace stateengine {
namespace {

// ---- reading Arrow arrays -----------------------------------------------------------------

inline bool ArrowBit(const void* bits, int64_t i) {
  return (static_cast<const uint8_t*>(bits)[i >> 3] >> (i & 7)) & 1;
}

// Whether logical row i of a is null (its validity buffer may be absent when nothing is).
inline bool ArrowIsNull(const ArrowArray* a, int64_t i) {
  return a->null_count != 0 && a->buffers[0] != nullptr && !ArrowBit(a->buffers[0], a->offset + i);
}

template <typename T>
inline T ArrowLoad(const ArrowArray* a, int buffer, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(a->buffers[buffer]) + (a->offset + i) * sizeof(T),
              sizeof(T));
  return v;
}

bool FormatIs(const ArrowSchema* t, const char* f) { return std::strcmp(t->format, f) == 0; }

bool FormatStarts(const ArrowSchema* t, const char* prefix) {
  return std::strncmp(t->format, prefix, std::strlen(prefix)) == 0;
}

bool DecimalFormat(const ArrowSchema* t, int precision, int scale) {
  const std::string want = "d:" + std::to_string(precision) + "," + std::to_string(scale);
  return t->format == want || t->format == want + ",128";
}

class ArrowEncoder {
 public:
  ArrowEncoder(const RowSchema& s, RowError* err) : s_(s), err_(err) {}

  // Whether Arrow type t can be read as node `index`; fills err's path otherwise.
  bool Check(uint32_t index, const ArrowSchema* t) {
    const RowNode& node = s_.node(index);
    if (t == nullptr || t->format == nullptr || t->dictionary != nullptr) return Fail(kRowArrowType);
    bool ok = false;
    switch (node.type) {
      case kRowBigint: ok = FormatIs(t, "l"); break;
      case kRowInt: ok = FormatIs(t, "i"); break;
      case kRowSmallint: ok = FormatIs(t, "s"); break;
      case kRowTinyint: ok = FormatIs(t, "c"); break;
      case kRowDouble: ok = FormatIs(t, "g"); break;
      case kRowFloat: ok = FormatIs(t, "f"); break;
      case kRowBoolean: ok = FormatIs(t, "b"); break;
      case kRowDate: ok = FormatIs(t, "tdD"); break;
      case kRowTimestamp: ok = FormatStarts(t, "tsu:"); break;
      case kRowTimestampNtz: ok = FormatIs(t, "tsu:"); break;
      case kRowString: ok = FormatIs(t, "u") || FormatIs(t, "U"); break;
      case kRowBinary: ok = FormatIs(t, "z") || FormatIs(t, "Z"); break;
      case kRowDecimal: ok = DecimalFormat(t, node.precision, node.scale); break;
      case kRowArray:
        if (!(FormatIs(t, "+l") || FormatIs(t, "+L")) || t->n_children != 1) break;
        if (!Check(s_.child(node, 0), t->children[0])) return Step(0);
        ok = true;
        break;
      case kRowMap: {
        if (!FormatIs(t, "+m") || t->n_children != 1) break;
        const ArrowSchema* entries = t->children[0];
        if (!FormatIs(entries, "+s") || entries->n_children != 2) break;
        for (uint32_t k = 0; k < 2; ++k) {
          if (!Check(s_.child(node, k), entries->children[k])) return Step(k);
        }
        ok = true;
        break;
      }
      case kRowStruct:
        if (!FormatIs(t, "+s") || t->n_children != static_cast<int64_t>(node.num_children)) break;
        for (uint32_t k = 0; k < node.num_children; ++k) {
          if (!Check(s_.child(node, k), t->children[k])) return Step(k);
        }
        ok = true;
        break;
      default:
        break;
    }
    return ok || Fail(kRowArrowType);
  }

  // Appends the encoding of logical row i of a (not null) as node `index`.
  bool Value(uint32_t index, const ArrowSchema* t, const ArrowArray* a, int64_t i,
             std::string* out) {
    const RowNode& node = s_.node(index);
    switch (node.type) {
      case kRowBigint:
        PutBE64(out, static_cast<uint64_t>(ArrowLoad<int64_t>(a, 1, i)));
        return true;
      case kRowInt:
        PutBE32(out, static_cast<uint32_t>(ArrowLoad<int32_t>(a, 1, i)));
        return true;
      case kRowSmallint: {
        const auto v = static_cast<uint16_t>(ArrowLoad<int16_t>(a, 1, i));
        out->push_back(static_cast<char>(v >> 8));
        out->push_back(static_cast<char>(v & 0xFF));
        return true;
      }
      case kRowTinyint:
        out->push_back(static_cast<char>(ArrowLoad<int8_t>(a, 1, i)));
        return true;
      case kRowDouble:
        PutBE64(out, DoubleBits(ArrowLoad<double>(a, 1, i)));
        return true;
      case kRowFloat:
        PutBE32(out, ArrowLoad<uint32_t>(a, 1, i));
        return true;
      case kRowBoolean:
        out->push_back(ArrowBit(a->buffers[1], a->offset + i) ? 1 : 0);
        return true;
      case kRowDate: {
        const int32_t days = ArrowLoad<int32_t>(a, 1, i);
        if (days < kMinDateDays || days > kMaxDateDays) return Fail(kRowOutOfRange);
        PutBE32(out, static_cast<uint32_t>(days));
        return true;
      }
      case kRowTimestamp:
      case kRowTimestampNtz: {
        const int64_t us = ArrowLoad<int64_t>(a, 1, i);
        if (us < kMinTimestampMicros || us > kMaxTimestampMicros) return Fail(kRowOutOfRange);
        PutBE64(out, static_cast<uint64_t>(us));
        return true;
      }
      case kRowString:
      case kRowBinary: {
        int64_t begin, end;
        if (t->format[0] == 'U' || t->format[0] == 'Z') {
          begin = ArrowLoad<int64_t>(a, 1, i);
          end = ArrowLoad<int64_t>(a, 1, i + 1);
        } else {
          begin = ArrowLoad<int32_t>(a, 1, i);
          end = ArrowLoad<int32_t>(a, 1, i + 1);
        }
        const char* p = static_cast<const char*>(a->buffers[2]) + begin;
        const size_t len = static_cast<size_t>(end - begin);
        if (node.type == kRowString && !ValidUtf8(p, len)) return Fail(kRowInvalidText);
        PutVarint(out, len);
        out->append(p, len);
        return true;
      }
      case kRowDecimal: {
        uint64_t lo, hi;
        const char* p = static_cast<const char*>(a->buffers[1]) + (a->offset + i) * 16;
        std::memcpy(&lo, p, 8);  // Arrow's decimal128: 16 bytes, little-endian
        std::memcpy(&hi, p + 8, 8);
        const Int128 v = static_cast<Int128>((static_cast<unsigned __int128>(hi) << 64) | lo);
        if (!DecimalFits(v, node.precision)) return Fail(kRowOutOfRange);
        PutDecimal(v, out);
        return true;
      }
      case kRowStruct: {
        const size_t bitmap_at = out->size();
        out->append(BitmapBytes(node.num_children), '\0');
        const int64_t ci = a->offset + i;  // a struct's offset applies to its children
        for (uint32_t k = 0; k < node.num_children; ++k) {
          const uint32_t child = s_.child(node, k);
          const ArrowArray* c = a->children[k];
          if (ArrowIsNull(c, ci)) {
            if (!s_.node(child).nullable) return FailAt(kRowNull, k);
            (*out)[bitmap_at + (k >> 3)] |= static_cast<char>(1 << (k & 7));
            continue;
          }
          if (!Value(child, t->children[k], c, ci, out)) return Step(k);
        }
        return true;
      }
      case kRowArray:
      case kRowMap: {
        int64_t begin, end;
        if (t->format[1] == 'L') {
          begin = ArrowLoad<int64_t>(a, 1, i);
          end = ArrowLoad<int64_t>(a, 1, i + 1);
        } else {
          begin = ArrowLoad<int32_t>(a, 1, i);
          end = ArrowLoad<int32_t>(a, 1, i + 1);
        }
        const uint64_t count = static_cast<uint64_t>(end - begin);
        PutVarint(out, count);
        const size_t bitmap_at = out->size();
        out->append(BitmapBytes(count), '\0');
        if (node.type == kRowArray) {
          const uint32_t elem = s_.child(node, 0);
          const bool nullable = s_.node(elem).nullable;
          const ArrowArray* c = a->children[0];
          for (uint64_t e = 0; e < count; ++e) {
            const int64_t ci = begin + static_cast<int64_t>(e);
            if (ArrowIsNull(c, ci)) {
              if (!nullable) return FailAt(kRowNull, static_cast<int64_t>(e));
              (*out)[bitmap_at + (e >> 3)] |= static_cast<char>(1 << (e & 7));
              continue;
            }
            if (!Value(elem, t->children[0], c, ci, out)) return Step(static_cast<int64_t>(e));
          }
          return true;
        }
        const ArrowArray* entries = a->children[0];
        const ArrowSchema* et = t->children[0];
        const uint32_t key = s_.child(node, 0), value = s_.child(node, 1);
        const bool nullable = s_.node(value).nullable;
        for (uint64_t e = 0; e < count; ++e) {
          const int64_t ci = entries->offset + begin + static_cast<int64_t>(e);
          const auto step = static_cast<int64_t>(2 * e);
          if (ArrowIsNull(entries->children[0], ci)) return FailAt(kRowNull, step);
          if (!Value(key, et->children[0], entries->children[0], ci, out)) return Step(step);
          if (ArrowIsNull(entries->children[1], ci)) {
            if (!nullable) return FailAt(kRowNull, step + 1);
            (*out)[bitmap_at + (e >> 3)] |= static_cast<char>(1 << (e & 7));
            continue;
          }
          if (!Value(value, et->children[1], entries->children[1], ci, out)) return Step(step + 1);
        }
        return true;
      }
      default:
        return Fail(kRowArrowType);
    }
  }

 private:
  bool Fail(int code) {
    err_->code = code;
    err_->path.clear();
    return false;
  }
  bool FailAt(int code, int64_t step) {
    Fail(code);
    return Step(step);
  }
  // Records one step of the failing path while unwinding (innermost first; reversed later).
  bool Step(int64_t step) {
    err_->path.push_back(step);
    return false;
  }

  const RowSchema& s_;
  RowError* err_;
};

// ---- building Arrow arrays ----------------------------------------------------------------

// The buffers of one column under construction; map columns keep their keys and values as
// children 0 and 1 (the entries struct between them is added on export).
struct Builder {
  uint32_t node = 0;
  uint8_t type = 0;
  int64_t length = 0;
  int64_t null_count = 0;
  std::vector<uint8_t> validity;
  std::vector<uint8_t> data;      // fixed-width values, boolean bits or string bytes
  std::vector<int32_t> offsets;   // strings, lists, maps: length + 1 entries
  std::vector<std::unique_ptr<Builder>> children;
};

// What an exported ArrowArray's private_data owns: its buffers and its children's structs.
struct Exported {
  std::vector<uint8_t> validity, data;
  std::vector<int32_t> offsets;
  const void* buffers[3] = {nullptr, nullptr, nullptr};
  std::unique_ptr<ArrowArray[]> child_arrays;
  std::unique_ptr<ArrowArray*[]> child_ptrs;
  int64_t n_children = 0;
};

void ReleaseExported(ArrowArray* a) {
  auto* priv = static_cast<Exported*>(a->private_data);
  for (int64_t i = 0; i < priv->n_children; ++i) {
    ArrowArray* c = priv->child_ptrs[i];
    if (c->release != nullptr) c->release(c);  // a consumer may have moved it out already
  }
  delete priv;
  a->release = nullptr;
}

class ArrowDecoder {
 public:
  explicit ArrowDecoder(const RowSchema& s) : s_(s) {}

  std::unique_ptr<Builder> Make(uint32_t index) {
    auto b = std::make_unique<Builder>();
    const RowNode& node = s_.node(index);
    b->node = index;
    b->type = node.type;
    if (node.type == kRowString || node.type == kRowBinary || node.type == kRowArray ||
        node.type == kRowMap) {
      b->offsets.push_back(0);
    }
    for (uint32_t k = 0; k < node.num_children; ++k) b->children.push_back(Make(s_.child(node, k)));
    return b;
  }

  // A list column whose elements are built by child 0 (ListState reads).
  std::unique_ptr<Builder> MakeList() {
    auto b = std::make_unique<Builder>();
    b->type = kRowArray;
    b->offsets.push_back(0);
    b->children.push_back(Make(0));
    return b;
  }

  // Sizes b's buffers (and its struct children's) for `rows` values up front: a batch read
  // knows its row count, and buffers grown by doubling copy their bytes and fault in fresh
  // pages about twice over (a list's offsets only: its elements, whose count is unknown,
  // still grow).
  void Reserve(Builder* b, size_t rows) {
    const RowNode& node = s_.node(b->node);
    b->validity.reserve(rows / 8 + 1);
    if (!b->offsets.empty()) b->offsets.reserve(rows + 1);
    if (b->type == kRowBoolean) {
      b->data.reserve(rows / 8 + 1);
    } else if (b->type == kRowDecimal) {
      b->data.reserve(rows * 16);
    } else if (node.fixed_width != 0 && b->type != kRowArray) {
      b->data.reserve(rows * node.fixed_width);
    } else if (b->type == kRowStruct) {
      for (auto& c : b->children) Reserve(c.get(), rows);
    }
  }

  static void Valid(Builder* b, bool valid) {
    if ((b->length & 7) == 0) b->validity.push_back(0);
    if (valid) {
      b->validity.back() |= static_cast<uint8_t>(1 << (b->length & 7));
    } else {
      ++b->null_count;
    }
    ++b->length;
  }

  void AppendNull(Builder* b) {
    const RowNode& node = s_.node(b->node);
    if (b->type == kRowBoolean) {
      if ((b->length & 7) == 0) b->data.push_back(0);
    } else if (node.fixed_width != 0 && b->type != kRowArray) {
      b->data.resize(b->data.size() + node.fixed_width, 0);
    } else if (b->type == kRowDecimal) {
      b->data.resize(b->data.size() + 16, 0);
    } else if (!b->offsets.empty()) {
      b->offsets.push_back(b->offsets.back());
    } else {  // struct: its children get a row too
      for (auto& c : b->children) AppendNull(c.get());
    }
    Valid(b, false);
  }

  // Appends the value of b's node at p (n bytes available); used gets its length.
  bool Append(Builder* b, const char* p, size_t n, size_t* used) {
    const RowNode& node = s_.node(b->node);
    switch (b->type) {
      case kRowBigint:
      case kRowTimestamp:
      case kRowTimestampNtz:
      case kRowDouble: {
        if (n < 8 || !InSparkRange(b->type, p)) return false;
        const uint64_t v = GetBE64(p);
        Put(b, &v, 8);
        *used = 8;
        break;
      }
      case kRowInt:
      case kRowDate:
      case kRowFloat: {
        if (n < 4 || !InSparkRange(b->type, p)) return false;
        const uint32_t v = GetBE32(p);
        Put(b, &v, 4);
        *used = 4;
        break;
      }
      case kRowSmallint: {
        if (n < 2) return false;
        const auto v = static_cast<uint16_t>((static_cast<unsigned char>(p[0]) << 8) |
                                             static_cast<unsigned char>(p[1]));
        Put(b, &v, 2);
        *used = 2;
        break;
      }
      case kRowTinyint:
        if (n < 1) return false;
        b->data.push_back(static_cast<uint8_t>(p[0]));
        *used = 1;
        break;
      case kRowBoolean: {
        if (n < 1 || static_cast<unsigned char>(p[0]) > 1) return false;
        if ((b->length & 7) == 0) b->data.push_back(0);
        if (p[0]) b->data.back() |= static_cast<uint8_t>(1 << (b->length & 7));
        *used = 1;
        break;
      }
      case kRowString:
      case kRowBinary: {
        uint64_t body;
        const size_t head = GetVarint(p, n, &body);
        if (head == 0 || body > n - head) return false;
        if (b->type == kRowString && !ValidUtf8(p + head, static_cast<size_t>(body))) return false;
        if (!Grow(b, body)) return false;
        b->data.insert(b->data.end(), p + head, p + head + body);
        b->offsets.push_back(static_cast<int32_t>(b->data.size()));
        *used = head + static_cast<size_t>(body);
        break;
      }
      case kRowDecimal: {
        Int128 v;
        if (!GetDecimal(p, n, node.precision, &v, used)) return false;
        const auto u = static_cast<unsigned __int128>(v);
        const uint64_t lo = static_cast<uint64_t>(u), hi = static_cast<uint64_t>(u >> 64);
        Put(b, &lo, 8);
        Put(b, &hi, 8);
        break;
      }
      case kRowStruct: {
        const size_t bitmap = BitmapBytes(node.num_children);
        if (n < bitmap) return false;
        size_t pos = bitmap;
        for (uint32_t k = 0; k < node.num_children; ++k) {
          Builder* c = b->children[k].get();
          if (BitSet(p, k)) {
            if (!s_.node(c->node).nullable) return false;
            AppendNull(c);
            continue;
          }
          size_t item = 0;
          if (!Append(c, p + pos, n - pos, &item)) return false;
          pos += item;
        }
        if ((node.num_children & 7) != 0 &&
            (static_cast<unsigned char>(p[bitmap - 1]) >> (node.num_children & 7)) != 0) {
          return false;
        }
        *used = pos;
        break;
      }
      case kRowArray:
      case kRowMap: {
        uint64_t count;
        const size_t head = GetVarint(p, n, &count);
        if (head == 0 || count > static_cast<uint64_t>(n - head) * 8) return false;
        size_t pos = head;
        const size_t bitmap = BitmapBytes(count);
        const char* bits = p + pos;
        pos += bitmap;
        Builder* elems = b->children[b->type == kRowMap ? 1 : 0].get();
        const bool nullable = s_.node(elems->node).nullable;
        for (uint64_t e = 0; e < count; ++e) {
          size_t item = 0;
          if (b->type == kRowMap) {
            if (!Append(b->children[0].get(), p + pos, n - pos, &item)) return false;
            pos += item;
          }
          if (BitSet(bits, e)) {
            if (!nullable) return false;
            AppendNull(elems);
            continue;
          }
          if (!Append(elems, p + pos, n - pos, &item)) return false;
          pos += item;
        }
        if ((count & 7) != 0 && (static_cast<unsigned char>(bits[bitmap - 1]) >> (count & 7)) != 0) {
          return false;
        }
        if (elems->length > std::numeric_limits<int32_t>::max()) {
          too_large_ = true;
          return false;
        }
        b->offsets.push_back(static_cast<int32_t>(elems->length));
        *used = pos;
        break;
      }
      default:
        return false;
    }
    Valid(b, true);
    return true;
  }

  // Appends the elements of a stored list (joined by ',') as one row of list builder b;
  // versions: an evolved state's schema versions (elements may be of older ones), else null.
  bool AppendList(Builder* b, const char* p, size_t n, const RowVersions* versions) {
    Builder* elems = b->children[0].get();
    size_t pos = 0;
    while (pos < n) {
      size_t used = 0;
      if (versions != nullptr) {
        size_t marker = 0, old_len = 0;
        bool upgraded = false;
        if (!versions->Read(p + pos, n - pos, false, &scratch_, &marker, &upgraded, &old_len)) {
          return false;
        }
        if (upgraded) {
          if (!Append(elems, scratch_.data(), scratch_.size(), &used) || used != scratch_.size()) {
            return false;
          }
          used = marker + old_len;
        } else {
          if (!Append(elems, p + pos + marker, n - pos - marker, &used)) return false;
          used += marker;
        }
      } else if (!Append(elems, p + pos, n - pos, &used)) {
        return false;
      }
      pos += used;
      if (pos < n) {
        if (p[pos] != kListDelimiterChar || pos + 1 == n) return false;
        ++pos;
      }
    }
    if (elems->length > std::numeric_limits<int32_t>::max()) {
      too_large_ = true;
      return false;
    }
    b->offsets.push_back(static_cast<int32_t>(elems->length));
    Valid(b, true);
    return true;
  }

  void AppendEmptyList(Builder* b) {
    b->offsets.push_back(b->offsets.back());
    Valid(b, true);
  }

  // Moves b's buffers into out, which then owns them (and b's children, exported too).
  void Export(std::unique_ptr<Builder> b, ArrowArray* out) {
    auto priv = std::make_unique<Exported>();
    out->length = b->length;
    out->null_count = b->null_count;
    out->offset = 0;
    out->dictionary = nullptr;
    priv->validity = std::move(b->validity);
    priv->data = std::move(b->data);
    priv->offsets = std::move(b->offsets);
    if (priv->data.capacity() == 0) priv->data.reserve(8);  // never a null data pointer
    priv->buffers[0] = b->null_count == 0 ? nullptr : priv->validity.data();
    std::vector<std::unique_ptr<Builder>> kids = std::move(b->children);
    switch (b->type) {
      case kRowString:
      case kRowBinary:
        out->n_buffers = 3;
        priv->buffers[1] = priv->offsets.data();
        priv->buffers[2] = priv->data.data();
        break;
      case kRowArray:
      case kRowMap:
        out->n_buffers = 2;
        priv->buffers[1] = priv->offsets.data();
        break;
      case kRowStruct:
        out->n_buffers = 1;
        break;
      default:
        out->n_buffers = 2;
        priv->buffers[1] = priv->data.data();
    }
    if (b->type == kRowMap) {
      // Arrow's map: one non-null child struct "entries" holding the keys and the values.
      auto entries = std::make_unique<Exported>();
      entries->n_children = 2;
      entries->child_arrays.reset(new ArrowArray[2]());
      entries->child_ptrs.reset(new ArrowArray*[2]);
      const int64_t total = kids[0]->length;
      for (int k = 0; k < 2; ++k) {
        entries->child_ptrs[k] = &entries->child_arrays[k];
        Export(std::move(kids[k]), &entries->child_arrays[k]);
      }
      priv->n_children = 1;
      priv->child_arrays.reset(new ArrowArray[1]());
      priv->child_ptrs.reset(new ArrowArray*[1]);
      priv->child_ptrs[0] = &priv->child_arrays[0];
      ArrowArray* e = &priv->child_arrays[0];
      e->length = total;
      e->null_count = 0;
      e->offset = 0;
      e->n_buffers = 1;
      e->buffers = entries->buffers;
      e->n_children = 2;
      e->children = entries->child_ptrs.get();
      e->dictionary = nullptr;
      e->release = ReleaseExported;
      e->private_data = entries.release();
    } else {
      priv->n_children = static_cast<int64_t>(kids.size());
      priv->child_arrays.reset(new ArrowArray[kids.size() + 1]());
      priv->child_ptrs.reset(new ArrowArray*[kids.size() + 1]);
      for (size_t k = 0; k < kids.size(); ++k) {
        priv->child_ptrs[k] = &priv->child_arrays[k];
        Export(std::move(kids[k]), &priv->child_arrays[k]);
      }
    }
    out->buffers = priv->buffers;
    out->n_children = priv->n_children;
    out->children = priv->child_ptrs.get();
    out->release = ReleaseExported;
    out->private_data = priv.release();
  }

  bool too_large() const { return too_large_; }

 private:
  static constexpr char kListDelimiterChar = ',';

  static void Put(Builder* b, const void* v, size_t width) {
    const size_t at = b->data.size();
    b->data.resize(at + width);
    std::memcpy(b->data.data() + at, v, width);
  }

  // Whether `more` bytes still fit Arrow's 32-bit offsets.
  bool Grow(Builder* b, uint64_t more) {
    if (b->data.size() + more > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      too_large_ = true;
      return false;
    }
    return true;
  }

  const RowSchema& s_;
  bool too_large_ = false;
  std::string scratch_;  // an upgraded old value (versions)
};

// ---- structs of fixed-width scalars --------------------------------------------------------

// A struct whose children are all 4- or 8-byte scalars (counters, sums, times: the usual typed
// value) is read and written without the generic per-field dispatch and per-value appends:
// its layout is a null bitmap and then each non-null child's big-endian bytes, so a row is one
// bounded loop over the children writing straight into buffers sized for the whole batch.
// Both directions accept and refuse exactly what the generic ArrowDecoder::Append and
// ArrowEncoder::Value do (tests/test_typed_state.py holds them to the scalar codec).
class FlatStruct {
 public:
  static constexpr size_t kMaxFields = 64;

  struct Field {
    uint8_t type;
    uint8_t width;
    bool nullable;
    bool ranged;  // dates and timestamps: years 1..9999 only
  };

  // Whether the root of s is such a struct (1 to kMaxFields children).
  bool Compile(const RowSchema& s) {
    const RowNode& root = s.node(0);
    if (root.type != kRowStruct || root.num_children == 0 || root.num_children > kMaxFields) {
      return false;
    }
    for (uint32_t k = 0; k < root.num_children; ++k) {
      const RowNode& c = s.node(s.child(root, k));
      uint8_t width = 0;
      switch (c.type) {
        case kRowBigint:
        case kRowDouble:
        case kRowTimestamp:
        case kRowTimestampNtz:
          width = 8;
          break;
        case kRowInt:
        case kRowFloat:
        case kRowDate:
          width = 4;
          break;
        default:
          return false;
      }
      const bool ranged = c.type == kRowDate || c.type == kRowTimestamp || c.type == kRowTimestampNtz;
      fields_.push_back(Field{c.type, width, c.nullable, ranged});
    }
    bitmap_ = BitmapBytes(root.num_children);
    return true;
  }

  // Decodes row_at(r) for every row (or *fill where a row has no value, when fill is set).
  template <typename RowAt>
  bool Decode(ArrowDecoder* dec, size_t rows, const std::string* fill, RowAt row_at,
              ArrowArray* out, RowError* err) const {
    Columns cols(this, dec, rows);
    for (size_t r = 0; r < rows; ++r) {
      rocksdb::Slice v;
      const bool stored = row_at(r, &v);
      if (!cols.Put(r, stored ? &v : nullptr, fill)) {
        err->code = kRowCorrupt;
        err->row = static_cast<int64_t>(r);
        return false;
      }
    }
    cols.Export(dec, out);
    return true;
  }

  // The output columns of a batch read, every row written in place (in any order).
  class Columns {
   public:
    Columns(const FlatStruct* flat, ArrowDecoder* dec, size_t rows)
        : flat_(flat), root_(dec->Make(0)), rows_(rows) {
      const size_t bits = rows / 8 + 1;
      root_->validity.assign(bits, 0);
      for (size_t k = 0; k < flat->fields_.size(); ++k) {
        Builder* c = root_->children[k].get();
        c->data.resize(rows * flat->fields_[k].width);  // zeros: a null child, as AppendNull
        c->validity.assign(bits, 0);
        c->length = static_cast<int64_t>(rows);
        data_[k] = c->data.data();
        valid_[k] = c->validity.data();
      }
    }

    // Row r holds *v; where v is null, *fill, or null without a fill. False as Row.
    bool Put(size_t r, const rocksdb::Slice* v, const std::string* fill) {
      if (v != nullptr) return Row(r, *v);
      if (fill != nullptr) return Row(r, rocksdb::Slice(*fill));
      Null();
      return true;
    }

    // Row r is null (its value bytes stay zero and its validity bits unset).
    void Null() {
      ++root_->null_count;
      for (auto& c : root_->children) ++c->null_count;
    }

    // Row r holds the value v; false if v is not a valid encoding of the struct.
    bool Row(size_t r, const rocksdb::Slice& v) {
      const char* p = v.data();
      const size_t n = v.size();
      const size_t bitmap = flat_->bitmap_;
      const size_t k_count = flat_->fields_.size();
      if (n < bitmap) return false;
      const uint8_t bit = static_cast<uint8_t>(1u << (r & 7));
      size_t pos = bitmap;
      for (size_t k = 0; k < k_count; ++k) {
        const Field& f = flat_->fields_[k];
        if (BitSet(p, k)) {
          if (!f.nullable) return false;
          ++root_->children[k]->null_count;
          continue;
        }
        if (n - pos < f.width || (f.ranged && !InSparkRange(f.type, p + pos))) return false;
        if (f.width == 8) {
          const uint64_t x = GetBE64(p + pos);
          std::memcpy(data_[k] + r * 8, &x, 8);
        } else {
          const uint32_t x = GetBE32(p + pos);
          std::memcpy(data_[k] + r * 4, &x, 4);
        }
        valid_[k][r >> 3] |= bit;
        pos += f.width;
      }
      if ((k_count & 7) != 0 && (static_cast<unsigned char>(p[bitmap - 1]) >> (k_count & 7)) != 0) {
        return false;
      }
      if (pos != n) return false;
      root_->validity[r >> 3] |= bit;
      return true;
    }

    // Asks for the cache lines row r will write (rows come in key order: a random permutation).
    STATEENGINE_PREFETCHES void Prefetch(size_t r) const {
      for (size_t k = 0; k < flat_->fields_.size(); ++k) {
        __builtin_prefetch(data_[k] + r * flat_->fields_[k].width, 1, 3);
      }
    }

    void Export(ArrowDecoder* dec, ArrowArray* out) {
      root_->length = static_cast<int64_t>(rows_);
      dec->Export(std::move(root_), out);
    }

   private:
    const FlatStruct* flat_;
    std::unique_ptr<Builder> root_;
    size_t rows_;
    uint8_t* data_[kMaxFields];
    uint8_t* valid_[kMaxFields];
  };

  // Appends the encoding of logical row i of struct array a (not null) to out; on a null in
  // a NOT NULL child or a time out of range, fills err (code and the child's index) instead.
  bool Encode(const ArrowArray* a, int64_t i, std::string* out, RowError* err) const {
    char buf[kMaxFields / 8 + kMaxFields * 8];
    std::memset(buf, 0, bitmap_);
    size_t pos = bitmap_;
    const int64_t ci = a->offset + i;  // a struct's offset applies to its children
    for (size_t k = 0; k < fields_.size(); ++k) {
      const Field& f = fields_[k];
      const ArrowArray* c = a->children[k];
      if (ArrowIsNull(c, ci)) {
        if (!f.nullable) return Refuse(kRowNull, k, err);
        buf[k >> 3] = static_cast<char>(buf[k >> 3] | (1 << (k & 7)));
        continue;
      }
      if (f.width == 8) {
        const uint64_t x = ArrowLoad<uint64_t>(c, 1, ci);
        if (f.ranged && (static_cast<int64_t>(x) < kMinTimestampMicros ||
                         static_cast<int64_t>(x) > kMaxTimestampMicros)) {
          return Refuse(kRowOutOfRange, k, err);
        }
        StoreBE64(buf + pos, x);
      } else {
        const uint32_t x = ArrowLoad<uint32_t>(c, 1, ci);
        if (f.ranged && (static_cast<int32_t>(x) < kMinDateDays ||
                         static_cast<int32_t>(x) > kMaxDateDays)) {
          return Refuse(kRowOutOfRange, k, err);
        }
        StoreBE32(buf + pos, x);
      }
      pos += f.width;
    }
    out->append(buf, pos);
    return true;
  }

 private:
  static bool Refuse(int code, size_t k, RowError* err) {
    err->code = code;
    err->path.assign(1, static_cast<int64_t>(k));
    return false;
  }

  std::vector<Field> fields_;
  size_t bitmap_ = 0;
};

// Decodes every stored value row(i) returns (found or not) into one Arrow array.
template <typename RowAt>
bool Decode(const RowSchema& s, const RowVersions* versions, size_t rows, int layout,
            const std::string* fill, RowAt row_at, ArrowArray* out, RowError* err) {
  try {
    ArrowDecoder dec(s);
    FlatStruct flat;
    if (layout == kStoredValue && versions == nullptr && flat.Compile(s)) {
      return flat.Decode(&dec, rows, fill, row_at, out, err);
    }
    std::string upgraded_value;
    std::unique_ptr<Builder> root = layout == kStoredList ? dec.MakeList() : dec.Make(0);
    dec.Reserve(root.get(), rows);
    for (size_t r = 0; r < rows; ++r) {
      rocksdb::Slice v;
      bool found = row_at(r, &v);
      bool ok = true;
      if (layout == kStoredList) {
        if (found) {
          ok = dec.AppendList(root.get(), v.data(), v.size(), versions);
        } else {
          dec.AppendEmptyList(root.get());
        }
      } else {
        if (found && layout == kStoredMapValue) {
          if (v.empty() || static_cast<unsigned char>(v[0]) > 1) {
            ok = false;
          } else if (v[0] == 1) {
            found = false;  // an entry whose value is None
          } else {
            v.remove_prefix(1);
          }
        }
        if (ok && found && versions != nullptr) {  // stored values may be of older versions
          size_t marker = 0, old_len = 0;
          bool upgraded = false;
          ok = versions->Read(v.data(), v.size(), true, &upgraded_value, &marker, &upgraded,
                              &old_len);
          if (ok && upgraded) {
            v = rocksdb::Slice(upgraded_value);
          } else if (ok) {
            v.remove_prefix(marker);
          }
        }
        if (ok && !found && fill != nullptr) {
          v = rocksdb::Slice(*fill);
          found = true;
        }
        if (ok && found) {
          size_t used = 0;
          ok = dec.Append(root.get(), v.data(), v.size(), &used) && used == v.size();
        } else if (ok) {
          dec.AppendNull(root.get());
        }
      }
      if (!ok) {
        err->code = dec.too_large() ? kRowTooLarge : kRowCorrupt;
        err->row = static_cast<int64_t>(r);
        return false;
      }
    }
    dec.Export(std::move(root), out);
    return true;
  } catch (const std::bad_alloc&) {  // no exception may reach the bindings
    err->code = kRowNoMemory;
    return false;
  }
}

}  // namespace

bool EncodeArrowRows(const RowSchema& schema, const ArrowSchema* type, const ArrowArray* array,
                     int null_rows, const std::string& prefix, std::string* data,
                     std::vector<int64_t>* offsets, std::vector<uint8_t>* nulls, RowError* err) {
  try {
    ArrowEncoder enc(schema, err);
    if (!enc.Check(0, type)) {
      std::reverse(err->path.begin(), err->path.end());
      return false;
    }
    const int64_t n = array->length;
    data->clear();
    offsets->assign(1, 0);
    offsets->reserve(static_cast<size_t>(n) + 1);
    nulls->assign(null_rows == kNullRowsMark ? static_cast<size_t>(n) : 0, 0);
    const bool marked = !prefix.empty();
    FlatStruct flat;
    const bool is_flat = flat.Compile(schema);
    for (int64_t r = 0; r < n; ++r) {
      if (r == 1) ReserveLike(data, static_cast<size_t>(n));
      if (ArrowIsNull(array, r)) {
        if (null_rows == kNullRowsRefuse) {
          err->code = kRowNullRow;
          err->row = r;
          return false;
        }
        if (null_rows == kNullRowsMark) (*nulls)[static_cast<size_t>(r)] = 1;
        if (null_rows == kNullRowsMapFlag) data->push_back(1);
      } else {
        if (null_rows == kNullRowsMapFlag) data->push_back(0);
        if (marked) data->append(prefix);
        if (is_flat ? !flat.Encode(array, r, data, err) : !enc.Value(0, type, array, r, data)) {
          err->row = r;
          std::reverse(err->path.begin(), err->path.end());
          return false;
        }
      }
      offsets->push_back(static_cast<int64_t>(data->size()));
    }
    return true;
  } catch (const std::bad_alloc&) {  // no exception may reach the bindings
    err->code = kRowNoMemory;
    return false;
  }
}

bool DecodeBatchToArrow(const RowSchema& schema, const RowVersions* versions,
                        const KeyBatch& batch, const BatchValues& values, int layout,
                        const std::string* fill, ArrowArray* out, uint8_t* found,
                        RowError* err) {
  const auto& group_of = batch.group_of();
  for (size_t r = 0; r < batch.rows(); ++r) found[r] = values.found[group_of[r]];
  return Decode(schema, versions, batch.rows(), layout, fill,
                [&](size_t r, rocksdb::Slice* v) {
                  const uint32_t g = group_of[r];
                  if (!values.found[g]) return false;
                  *v = values.value(g);
                  return true;
                },
                out, err);
}

rocksdb::Status ReadBatchToArrow(StateDB* db, int cf, const RowSchema& schema,
                                 const RowVersions* versions, const KeyBatch& batch,
                                 const std::string* fill, ArrowArray* out, uint8_t* found,
                                 RowError* err, bool* handled) {
  FlatStruct flat;
  *handled = versions == nullptr && db->ttl(cf) == nullptr && flat.Compile(schema);
  if (!*handled) return rocksdb::Status::OK();
  // Each group's value goes to the rows of its key (one for distinct keys), which lie at
  // random in the output: their cache lines are asked for a few groups ahead.
  class Visitor : public GroupVisitor {
   public:
    Visitor(const KeyBatch& batch, FlatStruct::Columns* cols, const std::string* fill,
            uint8_t* found, RowError* err)
        : order_(batch.order()), start_(batch.group_start()), cols_(cols), fill_(fill),
          found_(found), err_(err), groups_(batch.groups()) {}

    rocksdb::Status Visit(size_t g, const rocksdb::Slice* value) override {
      if (g + kPrefetchRows < groups_) cols_->Prefetch(order_[start_[g + kPrefetchRows]]);
      for (uint32_t i = start_[g]; i < start_[g + 1]; ++i) {
        const uint32_t r = order_[i];
        found_[r] = value != nullptr;
        if (!cols_->Put(r, value, fill_)) {
          err_->code = kRowCorrupt;
          err_->row = r;
          return rocksdb::Status::Corruption("a stored value does not decode");
        }
      }
      return rocksdb::Status::OK();
    }

   private:
    const std::vector<uint32_t>& order_;
    const std::vector<uint32_t>& start_;
    FlatStruct::Columns* cols_;
    const std::string* fill_;
    uint8_t* found_;
    RowError* err_;
    size_t groups_;
  };
  try {
    ArrowDecoder dec(schema);
    FlatStruct::Columns cols(&flat, &dec, batch.rows());
    Visitor visitor(batch, &cols, fill, found, err);
    rocksdb::Status st = VisitBatch(db, cf, batch, &visitor);
    if (err->code != kRowOk) return rocksdb::Status::OK();
    if (!st.ok()) return st;
    cols.Export(&dec, out);
    return st;
  } catch (const std::bad_alloc&) {  // no exception may reach the bindings
    err->code = kRowNoMemory;
    return rocksdb::Status::OK();
  }
}

bool DecodeSlicesToArrow(const RowSchema& schema, const RowVersions* versions,
                         const std::vector<rocksdb::Slice>& values, int layout, ArrowArray* out,
                         RowError* err) {
  return Decode(schema, versions, values.size(), layout, nullptr,
                [&](size_t r, rocksdb::Slice* v) {
                  *v = values[r];
                  return true;
                },
                out, err);
}

}  // namespace stateengine
