#include "batch_ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <memory>
#include <new>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "batch_ingest.h"
#include "composite_key.h"
#include "keygroups.h"
#include "prefetch.h"
#include "sorted_runs.h"
#include "status_guard.h"

namespace stateengine {
namespace {

// MultiGet pins blocks and memtables per key; bounded chunks keep that memory small.
constexpr size_t kMultiGetChunk = 4096;

bool IsByteKind(int kind) {
  return kind == kColOffsets32 || kind == kColOffsets64 || kind == kColFixedBytes ||
         kind == kColUcs4 || kind == kColSlices;
}

template <typename T>
T Load(const char* base, size_t row) {
  T v;
  std::memcpy(&v, base + row * sizeof(T), sizeof(T));  // numpy views need not be aligned
  return v;
}

void PutUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Requests a row of a column ahead of its use (prefetch.h): with offsets_only, the offsets
// of an offsets column; otherwise the row's bytes (their offsets must have arrived already).
STATEENGINE_PREFETCHES void PrefetchRow(const ColumnView& c, size_t row, bool offsets_only) {
  if (c.is_null != nullptr && offsets_only) Prefetch(c.is_null + row);
  switch (c.kind) {
    case kColOffsets32:
      if (offsets_only) {
        Prefetch(c.offsets32 + row);
      } else {
        Prefetch(c.data + c.offsets32[row]);
      }
      return;
    case kColOffsets64:
      if (offsets_only) {
        Prefetch(c.offsets64 + row);
      } else {
        Prefetch(c.data + c.offsets64[row]);
      }
      return;
    case kColInt64:
    case kColFloat64:
      if (!offsets_only) Prefetch(c.data + row * 8);
      return;
    case kColBool:
      if (!offsets_only) Prefetch(c.data + row);
      return;
    case kColFixedBytes:
      if (!offsets_only) Prefetch(c.data + row * c.width);
      return;
    case kColSlices:
      if (offsets_only) {
        Prefetch(c.slices + row);
      } else {
        Prefetch(c.slices[row].data());
      }
      return;
    default:
      return;
  }
}

// Before reading the i-th of the n rows a walk in key order visits (row_of(k) the k-th):
// requests the rows kPrefetchRows and 2 * kPrefetchRows later.
template <typename RowOf>
STATEENGINE_PREFETCHES void PrefetchAhead(const ColumnView& c, size_t n, size_t i,
                                          const RowOf& row_of) {
  if (i + 2 * kPrefetchRows < n) PrefetchRow(c, row_of(i + 2 * kPrefetchRows), true);
  if (i + kPrefetchRows < n) PrefetchRow(c, row_of(i + kPrefetchRows), false);
}

// The same over a batch's rows in key order.
STATEENGINE_PREFETCHES void PrefetchAhead(const ColumnView& c, const std::vector<uint32_t>& order,
                                          size_t i) {
  PrefetchAhead(c, order.size(), i, [&order](size_t k) { return order[k]; });
}

// The bytes of a byte-like row; UCS-4 rows are converted to UTF-8 in scratch.
int RowBytes(const ColumnView& c, size_t row, rocksdb::Slice* out, std::string* scratch) {
  switch (c.kind) {
    case kColOffsets32: {
      const int32_t b = c.offsets32[row], e = c.offsets32[row + 1];
      *out = rocksdb::Slice(c.data + b, static_cast<size_t>(e - b));
      return kBatchOk;
    }
    case kColOffsets64: {
      const int64_t b = c.offsets64[row], e = c.offsets64[row + 1];
      *out = rocksdb::Slice(c.data + b, static_cast<size_t>(e - b));
      return kBatchOk;
    }
    case kColFixedBytes: {
      const char* p = c.data + row * c.width;
      size_t n = c.width;
      while (n > 0 && p[n - 1] == 0) --n;
      *out = rocksdb::Slice(p, n);
      return kBatchOk;
    }
    case kColUcs4: {
      const char* p = c.data + row * c.width * 4;
      size_t n = c.width;
      while (n > 0 && Load<uint32_t>(p, n - 1) == 0) --n;
      scratch->clear();
      for (size_t i = 0; i < n; ++i) {
        const uint32_t cp = Load<uint32_t>(p, i);
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return kBatchInvalidText;
        PutUtf8(cp, scratch);
      }
      *out = rocksdb::Slice(*scratch);
      return kBatchOk;
    }
    case kColSlices:
      *out = c.slices[row];
      return kBatchOk;
    default:
      return kBatchUnsupported;
  }
}

// A finite double beyond float32's range is refused (as the scalar encoder does), not stored
// as infinity; infinities and NaN given as such are kept.
int PutF32(double d, std::string* out) {
  const float f = static_cast<float>(d);
  if (std::isinf(f) && std::isfinite(d)) return kBatchValueOutOfRange;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  PutBE32(out, bits);
  return kBatchOk;
}

int EncodeInt(int64_t v, Codec codec, std::string* out) {
  switch (codec) {
    case kI64:
      PutBE64(out, static_cast<uint64_t>(v));
      return kBatchOk;
    case kI32:
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
        return kBatchValueOutOfRange;
      }
      PutBE32(out, static_cast<uint32_t>(static_cast<int32_t>(v)));
      return kBatchOk;
    case kAny:
      out->push_back(static_cast<char>(kTagInt));
      PutBE64(out, static_cast<uint64_t>(v));
      return kBatchOk;
    case kF64:
      PutBE64(out, DoubleBits(static_cast<double>(v)));
      return kBatchOk;
    case kF32:
      return PutF32(static_cast<double>(v), out);
    case kOrdI64:
      PutBE64(out, OrderedI64(v));
      return kBatchOk;
    case kOrdF64:
      PutBE64(out, OrderedF64(static_cast<double>(v)));
      return kBatchOk;
    default:
      return kBatchUnsupported;
  }
}

int EncodeDouble(double d, Codec codec, bool is_key, std::string* out) {
  if (is_key) d = NormalizeKeyDouble(d);  // keys compare by value, as in the scalar path
  switch (codec) {
    case kF64:
      PutBE64(out, DoubleBits(d));
      return kBatchOk;
    case kF32:
      return PutF32(d, out);
    case kAny:
      out->push_back(static_cast<char>(kTagFloat));
      PutBE64(out, DoubleBits(d));
      return kBatchOk;
    case kOrdF64:
      PutBE64(out, OrderedF64(d));
      return kBatchOk;
    default:
      return kBatchUnsupported;
  }
}

int EncodeBytes(const rocksdb::Slice& s, bool text, Codec codec, std::string* out) {
  switch (codec) {
    case kAny:
      out->push_back(static_cast<char>(text ? kTagStr : kTagBytes));
      PutVarint(out, s.size());
      out->append(s.data(), s.size());
      return kBatchOk;
    case kStr:
    case kBytes:
      PutVarint(out, s.size());
      out->append(s.data(), s.size());
      return kBatchOk;
    case kOrdStr:
    case kOrdBytes:
      out->append(s.data(), s.size());
      return kBatchOk;
    default:
      return kBatchUnsupported;
  }
}

// A number operand as the scalar add() of a native reducer would merge it: DOUBLE states
// merge doubles, BIGINT states integers, ANY states keep the value's own kind.
bool RowNumber(const ColumnView& c, size_t row, Codec codec, Number* n) {
  if (c.kind == kColInt64) {
    const int64_t v = Load<int64_t>(c.data, row);
    if (codec == kF64) {
      n->is_int = false;
      n->d = static_cast<double>(v);
    } else {
      n->is_int = true;
      n->i = v;
    }
    return true;
  }
  if (c.kind == kColFloat64) {
    n->is_int = false;
    n->d = Load<double>(c.data, row);
    return true;
  }
  rocksdb::Slice s;
  std::string unused;
  if (!c.encoded || RowBytes(c, row, &s, &unused) != kBatchOk) return false;
  return ReadNumber(codec, s.data(), s.size(), n);
}

rocksdb::Status Invalid(BatchError* err, int code, size_t row) {
  err->code = code;
  err->row = row;
  return rocksdb::Status::InvalidArgument("batch row rejected");
}

}  // namespace

bool CanEncodeColumn(int kind, bool text, Codec codec, bool is_key) {
  switch (kind) {
    case kColInt64:
      if (codec == kI64 || codec == kI32 || codec == kF64 || codec == kF32) return true;
      return !is_key && (codec == kAny || codec == kOrdI64 || codec == kOrdF64);
    case kColFloat64:
      if (codec == kF64 || codec == kF32) return true;
      return !is_key && (codec == kAny || codec == kOrdF64);
    case kColBool:
      return codec == kBool || (!is_key && codec == kAny);
    default:
      if (!IsByteKind(kind)) return false;
      if (text) return codec == kStr || (!is_key && (codec == kAny || codec == kOrdStr));
      return codec == kBytes || (!is_key && (codec == kAny || codec == kOrdBytes));
  }
}

bool CanMergeNumbers(int kind, Codec codec) {
  if (kind == kColInt64) return codec == kI64 || codec == kF64 || codec == kAny;
  if (kind == kColFloat64) return codec == kF64 || codec == kAny;
  return false;
}

int EncodeColumnRow(const ColumnView& col, size_t row, Codec codec, bool is_key,
                    std::string* out, std::string* scratch) {
  switch (col.kind) {
    case kColInt64:
      return EncodeInt(Load<int64_t>(col.data, row), codec, out);
    case kColFloat64:
      return EncodeDouble(Load<double>(col.data, row), codec, is_key, out);
    case kColBool: {
      const bool b = col.data[row] != 0;
      if (codec == kBool) {
        out->push_back(b ? 1 : 0);
      } else if (codec == kAny) {
        out->push_back(static_cast<char>(b ? kTagTrue : kTagFalse));
      } else {
        return kBatchUnsupported;
      }
      return kBatchOk;
    }
    default: {
      rocksdb::Slice s;
      const int rc = RowBytes(col, row, &s, scratch);
      if (rc != kBatchOk) return rc;
      if (col.encoded) {
        out->append(s.data(), s.size());
        return kBatchOk;
      }
      return EncodeBytes(s, col.text, codec, out);
    }
  }
}

namespace {

// A row's composite key as W big-endian words (zero-padded), its length and its row: comparing
// words, then length, then row orders rows exactly as comparing their bytes and then their
// input positions does (a zero-padded prefix ties only with a longer key, which the length
// puts second), without touching the arena or calling memcmp in the sort.
template <int W>
struct WordKey {
  uint64_t w[W];
  uint32_t len;
  uint32_t row;
  bool operator<(const WordKey& o) const {
    for (int i = 0; i < W; ++i) {
      if (w[i] != o.w[i]) return w[i] < o.w[i];
    }
    if (len != o.len) return len < o.len;
    return row < o.row;
  }
  bool SameKey(const WordKey& o) const {
    for (int i = 0; i < W; ++i) {
      if (w[i] != o.w[i]) return false;
    }
    return len == o.len;
  }
};

template <int W>
WordKey<W> MakeWordKey(const rocksdb::Slice& k, uint32_t row) {
  char buf[W * 8] = {};
  std::memcpy(buf, k.data(), k.size());
  WordKey<W> e;
  for (int i = 0; i < W; ++i) e.w[i] = GetBE64(buf + 8 * i);
  e.len = static_cast<uint32_t>(k.size());
  e.row = row;
  return e;
}

// Stable LSD radix sort on (words, len): rows with equal keys keep their input order. Only
// the bytes that differ somewhere in the batch get a pass (a bigint key below 2^24 in a batch
// needs ~4 of its 17), and each pass is two branch-free sweeps, where a comparison sort of
// random keys mispredicts about every other branch.
// Rows already in order after their first prefix_bytes bytes (the key group), as the sorted
// output of np.unique or a groupby is, need the passes over those bytes only: stable passes
// keep the order of the rest.
template <int W>
bool SortedAfterPrefix(const std::vector<WordKey<W>>& v, int prefix_bytes) {
  if (prefix_bytes <= 0 || prefix_bytes >= 8) return false;
  const uint64_t mask = ~uint64_t{0} >> (8 * prefix_bytes);
  auto less = [mask](const WordKey<W>& a, const WordKey<W>& b) {
    if ((a.w[0] & mask) != (b.w[0] & mask)) return (a.w[0] & mask) < (b.w[0] & mask);
    for (int i = 1; i < W; ++i) {
      if (a.w[i] != b.w[i]) return a.w[i] < b.w[i];
    }
    return a.len < b.len;
  };
  for (size_t i = 1; i < v.size(); ++i) {
    if (less(v[i], v[i - 1])) return false;
  }
  return true;
}

// One stable counting pass by an 8-bit digit from *src into *dst, which then swap.
template <typename T, typename Digit>
void RadixPass(T** src, T** dst, size_t n, Digit digit) {
  uint32_t count[256] = {};
  const T* in = *src;
  T* out = *dst;
  for (size_t i = 0; i < n; ++i) ++count[digit(in[i])];
  uint32_t sum = 0;
  for (auto& c : count) {
    const uint32_t k = c;
    c = sum;
    sum += k;
  }
  for (size_t i = 0; i < n; ++i) out[count[digit(in[i])]++] = in[i];
  std::swap(*src, *dst);
}

template <int W>
void RadixSort(std::vector<WordKey<W>>* v, std::vector<WordKey<W>>* tmp, int prefix_bytes) {
  const size_t n = v->size();
  if (n < 2) return;
  uint64_t diff[W] = {};
  uint32_t len_diff = 0;
  const WordKey<W>& first = (*v)[0];
  for (const auto& e : *v) {
    for (int i = 0; i < W; ++i) diff[i] |= e.w[i] ^ first.w[i];
    len_diff |= e.len ^ first.len;
  }
  if (SortedAfterPrefix(*v, prefix_bytes)) {
    len_diff = 0;
    for (int i = 1; i < W; ++i) diff[i] = 0;
    diff[0] &= ~(~uint64_t{0} >> (8 * prefix_bytes));
  }
  tmp->resize(n);
  WordKey<W>* src = v->data();
  WordKey<W>* dst = tmp->data();
  auto pass = [&](auto digit) { RadixPass(&src, &dst, n, digit); };
  if (len_diff != 0) pass([](const WordKey<W>& e) { return static_cast<uint8_t>(e.len); });
  for (int i = W - 1; i >= 0; --i) {
    for (int shift = 0; shift < 64; shift += 8) {
      if (((diff[i] >> shift) & 0xFF) == 0) continue;
      pass([i, shift](const WordKey<W>& e) { return static_cast<uint8_t>(e.w[i] >> shift); });
    }
  }
  if (src != v->data()) v->swap(*tmp);
}

// Stable LSD radix sort of a bigint batch by (key group, value): only the bytes that differ
// somewhere get a pass, and none of the value's when the rows are in value order already (the
// sorted output of np.unique or a groupby): the key-group passes keep that order.
void SortBigintKeys(std::vector<BigintKey>* v, bool values_sorted) {
  const size_t n = v->size();
  if (n < 2) return;
  uint64_t vdiff = 0;
  uint32_t kdiff = 0;
  const BigintKey first = (*v)[0];
  for (const auto& e : *v) {
    vdiff |= e.v ^ first.v;
    kdiff |= e.kg ^ first.kg;
  }
  if (values_sorted) vdiff = 0;
  if (vdiff == 0 && kdiff == 0) return;
  std::vector<BigintKey> tmp(n);
  BigintKey* src = v->data();
  BigintKey* dst = tmp.data();
  for (int shift = 0; shift < 64; shift += 8) {
    if (((vdiff >> shift) & 0xFF) == 0) continue;
    RadixPass(&src, &dst, n, [shift](const BigintKey& e) { return static_cast<uint8_t>(e.v >> shift); });
  }
  for (int shift = 0; shift < 32; shift += 8) {
    if (((kdiff >> shift) & 0xFF) == 0) continue;
    RadixPass(&src, &dst, n, [shift](const BigintKey& e) { return static_cast<uint8_t>(e.kg >> shift); });
  }
  if (src != v->data()) v->swap(tmp);
}

}  // namespace

void KeyBatch::SortBigints(std::vector<BigintKey>* entries, bool values_sorted,
                           const BatchTarget& t, size_t width) {
  const size_t n = entries->size();
  order_.resize(n);
  group_of_.resize(n);
  SortBigintKeys(entries, values_sorted);
  const auto& e = *entries;
  // Equal values have equal key groups, so equal keys are neighbours.
  Group(n, [&](size_t i) { return e[i].row; }, [&](size_t i) { return e[i - 1].v == e[i].v; });
  const size_t groups = group_start_.size() - 1;
  const size_t prefix = static_cast<size_t>(t.prefix_bytes);
  group_offsets_.resize(groups + 1);
  group_arena_.resize(groups * width);
  char* out = &group_arena_[0];
  for (size_t g = 0; g < groups; ++g) {
    const BigintKey& k = e[group_start_[g]];
    char* p = out + g * width;
    WriteKeyGroupPrefix(static_cast<int32_t>(k.kg) + t.kg_start, t.prefix_bytes, p);
    StoreBE64(p + prefix, k.v);
    std::memcpy(p + prefix + 8, t.ns->data(), t.ns->size());
    group_offsets_[g] = g * width;
  }
  group_offsets_[groups] = groups * width;
}

template <int W>
void KeyBatch::SortWords() {
  const size_t n = offsets_.size() - 1;
  std::vector<WordKey<W>> entries(n), tmp;
  for (size_t row = 0; row < n; ++row) {
    entries[row] = MakeWordKey<W>(row_key(row), static_cast<uint32_t>(row));
  }
  if (n < 64) {
    std::sort(entries.begin(), entries.end());
  } else {
    RadixSort<W>(&entries, &tmp, prefix_bytes_);
  }
  Group(n, [&](size_t i) { return entries[i].row; },
        [&](size_t i) { return entries[i - 1].SameKey(entries[i]); });
  // The distinct keys from the sorted words, which hold their bytes already.
  const size_t groups = group_start_.size() - 1;
  group_offsets_.resize(groups + 1);
  group_arena_.resize(arena_.size());  // at most the rows' bytes
  char* out = &group_arena_[0];
  size_t at = 0;
  for (size_t g = 0; g < groups; ++g) {
    const WordKey<W>& e = entries[group_start_[g]];
    char buf[W * 8];
    for (int i = 0; i < W; ++i) StoreBE64(buf + 8 * i, e.w[i]);
    std::memcpy(out + at, buf, e.len);
    group_offsets_[g] = at;
    at += e.len;
  }
  group_offsets_[groups] = at;
  group_arena_.resize(at);
}

void KeyBatch::CopyGroupKeys() {
  const size_t groups = group_start_.size() - 1;
  group_offsets_.resize(groups + 1);
  group_arena_.clear();
  group_arena_.reserve(arena_.size());
  for (size_t g = 0; g < groups; ++g) {
    group_offsets_[g] = group_arena_.size();
    const rocksdb::Slice k = row_key(order_[group_start_[g]]);
    group_arena_.append(k.data(), k.size());
  }
  group_offsets_[groups] = group_arena_.size();
}

template <typename RowAt, typename SameAsPrevious>
void KeyBatch::Group(size_t n, RowAt row_at, SameAsPrevious same_as_previous) {
  group_start_.clear();
  group_start_.reserve(n + 1);  // at most a group per row; pages untouched are never faulted in
  for (size_t i = 0; i < n; ++i) {
    const uint32_t row = row_at(i);
    order_[i] = row;
    if (i == 0 || !same_as_previous(i)) group_start_.push_back(static_cast<uint32_t>(i));
    group_of_[row] = static_cast<uint32_t>(group_start_.size() - 1);
  }
  group_start_.push_back(static_cast<uint32_t>(n));
}

void KeyBatch::SortRows() {
  const size_t n = offsets_.size() - 1;
  order_.resize(n);
  group_of_.resize(n);
  size_t longest = 0;
  for (size_t row = 0; row < n; ++row) longest = std::max(longest, offsets_[row + 1] - offsets_[row]);
  // Keys of up to 24 bytes (a bigint key with its namespace, most map entries) sort as words.
  if (longest <= 8) {
    SortWords<1>();
  } else if (longest <= 16) {
    SortWords<2>();
  } else if (longest <= 24) {
    SortWords<3>();
  } else {
    // Longer keys: the first 8 bytes decide most pairs, the bytes and then the row the rest.
    struct Entry {
      uint64_t head;
      uint32_t row;
    };
    std::vector<Entry> entries(n);
    for (size_t row = 0; row < n; ++row) {
      const rocksdb::Slice k = row_key(row);
      char buf[8] = {};
      std::memcpy(buf, k.data(), std::min<size_t>(8, k.size()));
      entries[row] = {GetBE64(buf), static_cast<uint32_t>(row)};
    }
    std::sort(entries.begin(), entries.end(), [this](const Entry& a, const Entry& b) {
      if (a.head != b.head) return a.head < b.head;
      const int c = row_key(a.row).compare(row_key(b.row));
      if (c != 0) return c < 0;
      return a.row < b.row;
    });
    Group(n, [&](size_t i) { return entries[i].row; },
          [&](size_t i) { return row_key(entries[i - 1].row) == row_key(entries[i].row); });
    CopyGroupKeys();
  }
}

bool KeyBatch::BuiltFrom(const BatchTarget& t, const ColumnView& keys) const {
  const BatchTarget& b = bigint_target_;
  return bigint_valid_ && b.schema == t.schema && b.prefix_bytes == t.prefix_bytes &&
         b.max_parallelism == t.max_parallelism && b.kg_start == t.kg_start &&
         b.kg_end == t.kg_end && b.ns_variable == t.ns_variable && bigint_ns_ == *t.ns &&
         bigint_input_.size() == keys.size * sizeof(int64_t) &&
         std::memcmp(bigint_input_.data(), keys.data, bigint_input_.size()) == 0;
}

bool KeyBatch::BuildBigint(const BatchTarget& t, const ColumnView& keys, BatchError* err) {
  if (BuiltFrom(t, keys)) return true;
  bigint_valid_ = false;
  const size_t n = keys.size;
  // A bigint key is fixed-length, so no length suffixes: every key is [kg][8 bytes][ns].
  const size_t prefix = static_cast<size_t>(t.prefix_bytes);
  const size_t width = prefix + 8 + t.ns->size();
  // Sorted as (key group, value) pairs rather than as bytes (SortRows), and only the distinct
  // keys written out: less memory to fault in and move than the rows' keys plus 24-byte
  // words, and no copy of each row's key into words.
  arena_.clear();
  offsets_.clear();
  std::vector<BigintKey> entries(n);
  bool values_sorted = true;
  uint64_t previous = 0;
  for (size_t row = 0; row < n; ++row) {
    const int64_t v = Load<int64_t>(keys.data, row);
    const int32_t kg = KeyGroupForHash(SparkHashLong(v, kSparkHashSeed), t.max_parallelism);
    if (kg < t.kg_start || kg > t.kg_end) {
      err->code = kBatchKeyGroupOutOfRange;
      err->row = row;
      err->key_group = kg;
      return false;
    }
    const uint64_t u = static_cast<uint64_t>(v);  // the key's bytes compare as unsigned
    values_sorted = values_sorted && u >= previous;
    previous = u;
    entries[row] = {u, static_cast<uint32_t>(kg - t.kg_start), static_cast<uint32_t>(row)};
  }
  SortBigints(&entries, values_sorted, t, width);
  bigint_input_.assign(keys.data, n * sizeof(int64_t));
  bigint_target_ = t;
  bigint_ns_ = *t.ns;
  bigint_target_.ns = nullptr;  // compared through bigint_ns_
  bigint_valid_ = true;
  return true;
}

bool KeyBatch::Build(const BatchTarget& t, const ColumnView& keys, const ColumnView* user_keys,
                     Codec uk_codec, BatchError* err) {
  prefix_bytes_ = t.prefix_bytes;
  try {
    return BuildRows(t, keys, user_keys, uk_codec, err);
  } catch (const std::bad_alloc&) {  // no exception may reach the bindings
    bigint_valid_ = false;
    err->code = kBatchNoMemory;
    return false;
  }
}

bool KeyBatch::BuildRows(const BatchTarget& t, const ColumnView& keys,
                         const ColumnView* user_keys, Codec uk_codec, BatchError* err) {
  const size_t n = keys.size;
  if (n >= std::numeric_limits<uint32_t>::max()) {
    err->code = kBatchTooLarge;
    return false;
  }
  const Codec key_codec = t.schema->columns().size() == 1 ? t.schema->columns()[0] : kVoid;
  // The common case of a pandas UDF, int64 keys of a bigint schema, skips the generic
  // encode / parse-to-hash / builder copies per row.
  if (user_keys == nullptr && !keys.encoded && keys.kind == kColInt64 && key_codec == kI64) {
    return BuildBigint(t, keys, err);
  }
  bigint_valid_ = false;  // the arena is rebuilt below
  CompositeKeyBuilder builder(t.prefix_bytes, t.schema->variable_length());
  std::string key, uk, scratch;
  arena_.clear();
  // Fixed-width keys make the arena's size known up front; growing it would copy and fault
  // in fresh pages several times per batch.
  arena_.reserve(n * (t.prefix_bytes + 8 + t.ns->size() + (user_keys != nullptr ? 9 : 0)));
  offsets_.assign(1, 0);
  offsets_.reserve(n + 1);
  for (size_t row = 0; row < n; ++row) {
    key.clear();
    int rc = keys.encoded ? EncodeColumnRow(keys, row, kVoid, true, &key, &scratch)
                          : EncodeColumnRow(keys, row, key_codec, true, &key, &scratch);
    if (rc != kBatchOk) {
      err->code = rc;
      err->row = row;
      return false;
    }
    int32_t hash;
    if (!t.schema->Hash(key.data(), key.size(), &hash)) {
      err->code = kBatchBadKey;
      err->row = row;
      return false;
    }
    const int32_t kg = KeyGroupForHash(hash, t.max_parallelism);
    if (kg < t.kg_start || kg > t.kg_end) {
      err->code = kBatchKeyGroupOutOfRange;
      err->row = row;
      err->key_group = kg;
      return false;
    }
    builder.SetKey(kg, key.data(), key.size());
    if (user_keys != nullptr) {
      uk.clear();
      rc = EncodeColumnRow(*user_keys, row, uk_codec, false, &uk, &scratch);
      if (rc != kBatchOk) {
        err->code = rc;
        err->row = row;
        err->user_key = true;
        return false;
      }
      const std::string& ck = builder.BuildWithUserKey(*t.ns, t.ns_variable, uk.data(), uk.size());
      arena_.append(ck);
    } else {
      arena_.append(builder.Build(*t.ns, t.ns_variable));
    }
    offsets_.push_back(arena_.size());
  }

  SortRows();
  return true;
}

namespace {

// A batch put counts like the scalar calls it stands for: a row per element (per group when
// the caller already reduced the batch to one value per key), a None value as a delete.
void CountPutRows(StateDB* db, const KeyBatch& batch, const ColumnView& values, bool per_group) {
  const size_t rows = per_group ? batch.groups() : batch.rows();
  uint64_t deletes = 0;
  if (values.is_null != nullptr) {
    for (size_t r = 0; r < rows; ++r) deletes += values.is_null[r] != 0;
  }
  db->CountWrites(rows - deletes);
  db->CountDeletes(deletes);
}

}  // namespace

namespace {

// What a WriteBatch of one put per group will hold, reserved up front: growing the batch's
// buffer by doubling copied it ~20 times for a batch of 400k small entries.
size_t PutBatchBytes(const KeyBatch& batch, const ColumnView& values) {
  const size_t groups = batch.groups();
  if (groups == 0) return 0;
  size_t key_bytes = 0;
  for (size_t g = 0; g < groups; ++g) key_bytes += batch.group_key(g).size();
  size_t value_bytes = groups * 9;  // numbers: at most a tag and 8 bytes
  if (values.kind == kColOffsets32 && values.size > 0) {
    value_bytes = static_cast<size_t>(values.offsets32[values.size] - values.offsets32[0]);
  } else if (values.kind == kColOffsets64 && values.size > 0) {
    value_bytes = static_cast<size_t>(values.offsets64[values.size] - values.offsets64[0]);
  }
  // a value column of one row per input row, several rows per key: about its share
  if (values.size > groups) value_bytes = value_bytes / values.size * groups;
  // WriteBatch header, then per entry a tag, a column family id and two length varints
  return 12 + key_bytes + value_bytes + groups * 12;
}

}  // namespace

namespace {

// A batch put's entries through the memtable: one WriteBatch. (The other sink is an
// IngestedBatch, batch_ingest.h.) Both take the distinct keys in key order.
struct WriteBatchSink {
  StateDB* db;
  rocksdb::ColumnFamilyHandle* h;
  rocksdb::WriteBatch wb;
  WriteBatchSink(StateDB* d, int cf, size_t reserve) : db(d), h(d->handle(cf)), wb(reserve) {}
  rocksdb::Status Put(const rocksdb::Slice& k, const rocksdb::Slice& v) { return wb.Put(h, k, v); }
  rocksdb::Status Delete(const rocksdb::Slice& k) { return wb.Delete(h, k); }
  rocksdb::Status Finish() { return wb.Count() == 0 ? rocksdb::Status::OK() : db->Write(&wb); }
};

// The entries of a batch put, one per distinct key in key order, into sink.
template <typename Sink>
rocksdb::Status PutGroups(Sink* sink, const TtlState* ttl, int64_t now, const KeyBatch& batch,
                          const ColumnView& values, Codec value_codec, bool map_values,
                          bool per_group, BatchError* err) {
  std::string val, scratch, stamped;
  const auto& order = batch.order();
  const auto& start = batch.group_start();
  // Rows already in the stored encoding (typed columns, bytes the bindings encoded; map
  // values carry their flag) go into the batch from the column itself, without a copy.
  const bool as_is = values.encoded && ttl == nullptr;
  const size_t groups = batch.groups();
  auto row_of = [&](size_t g) -> size_t {
    return per_group ? g : order[start[g + 1] - 1];  // the last write wins
  };
  for (size_t g = 0; g < groups; ++g) {
    const size_t row = row_of(g);
    if (!per_group) PrefetchAhead(values, groups, g, row_of);  // per group: in order already
    if (values.is_null != nullptr && values.is_null[row]) {
      rocksdb::Status st = sink->Delete(batch.group_key(g));
      if (!st.ok()) return st;
      continue;
    }
    if (as_is) {
      rocksdb::Slice s;
      const int rc = RowBytes(values, row, &s, &scratch);
      if (rc != kBatchOk) return Invalid(err, rc, row);
      rocksdb::Status st = sink->Put(batch.group_key(g), s);
      if (!st.ok()) return st;
      continue;
    }
    val.clear();
    if (map_values && !values.encoded) val.push_back(0);  // Flink's "value is not null" flag
    const int rc = EncodeColumnRow(values, row, value_codec, false, &val, &scratch);
    if (rc != kBatchOk) return Invalid(err, rc, row);
    rocksdb::Status st;
    if (ttl != nullptr) {
      if (!(st = ttl->Stamp(val, now, &stamped)).ok()) return st;
      st = sink->Put(batch.group_key(g), stamped);
    } else {
      st = sink->Put(batch.group_key(g), val);
    }
    if (!st.ok()) return st;
  }
  return rocksdb::Status::OK();
}

}  // namespace

rocksdb::Status BatchPut(StateDB* db, int cf, const KeyBatch& batch, const ColumnView& values,
                         Codec value_codec, bool map_values, bool per_group, BatchError* err) {
  const TtlState* ttl = db->ttl(cf).get();
  int64_t now = 0;
  if (ttl != nullptr) {
    rocksdb::Status st = ttl->AccessTime(&now);
    if (!st.ok()) return st;
  }
  return GuardStatus("writing a batch", [&]() -> rocksdb::Status {
    auto write = [&](auto* sink) {
      rocksdb::Status s = PutGroups(sink, ttl, now, batch, values, value_codec, map_values,
                                    per_group, err);
      return s.ok() ? sink->Finish() : s;
    };
    rocksdb::Status st;
    const size_t groups = batch.groups();
    bool bottommost = false;
    if (groups > 0 && IngestBatchPut(db, cf, groups, batch.group_key(0),
                                     batch.group_key(groups - 1), &bottommost)) {
      IngestedBatch file(db, cf, bottommost);
      st = file.Open();
      if (st.ok()) st = write(&file);
    } else {
      WriteBatchSink sink(db, cf, PutBatchBytes(batch, values));
      st = write(&sink);
    }
    if (st.ok()) CountPutRows(db, batch, values, per_group);
    return st;
  });
}

rocksdb::Status BatchMergeNumbers(StateDB* db, int cf, const KeyBatch& batch,
                                  const ColumnView& values, Codec codec, NumericOp op,
                                  bool count, BatchError* err) {
  const TtlState* ttl = db->ttl(cf).get();
  int64_t now = 0;
  if (ttl != nullptr) {
    rocksdb::Status st = ttl->AccessTime(&now);
    if (!st.ok()) return st;
  }
  return GuardStatus("merging a batch", [&]() -> rocksdb::Status {
    rocksdb::WriteBatch wb;
    rocksdb::ColumnFamilyHandle* h = db->handle(cf);
    std::string operand, folded;
    // With TTL, adds fold in C++ (see StateDB::TtlMerge): one sorted read of the distinct keys
    // and one put each, under the state's lock.
    std::unique_lock<std::mutex> lock;
    BatchValues stored;
    if (ttl != nullptr) {
      lock = std::unique_lock<std::mutex>(ttl->fold_mutex());
      rocksdb::Status st = GetGroups(db, cf, batch, GroupRead::kStored, &stored);
      if (!st.ok()) return st;
    }
    const auto& order = batch.order();
    const auto& start = batch.group_start();
    for (size_t g = 0; g < batch.groups(); ++g) {
      Number acc;
      if (count) {
        // COUNT merges 1 per element, so the pre-aggregate is the group size, in the state's codec.
        acc.is_int = codec != kF64;
        acc.i = static_cast<int64_t>(start[g + 1] - start[g]);
        acc.d = static_cast<double>(acc.i);
      } else {
        for (size_t i = start[g]; i < start[g + 1]; ++i) {
          PrefetchAhead(values, order, i);
          Number n;
          if (!RowNumber(values, order[i], codec, &n)) {
            return Invalid(err, kBatchUnsupported, order[i]);
          }
          acc = i == start[g] ? n : CombineNumbers(op, acc, n);
        }
      }
      operand.clear();
      WriteNumber(codec, acc, &operand);
      rocksdb::Status st;
      if (ttl != nullptr) {
        const rocksdb::Slice current = stored.value(g);
        st = ttl->Fold(stored.found[g] ? &current : nullptr, operand, now, &folded);
        if (st.ok()) st = wb.Put(h, batch.group_key(g), folded);
      } else {
        st = wb.Merge(h, batch.group_key(g), operand);
      }
      if (!st.ok()) return st;
    }
    rocksdb::Status st = wb.Count() == 0 ? rocksdb::Status::OK() : db->Write(&wb);
    if (st.ok()) db->CountWrites(batch.rows());
    return st;
  });
}

rocksdb::Status BatchMergeList(StateDB* db, int cf, const KeyBatch& batch,
                               const ColumnView& values, Codec codec, BatchError* err) {
  const TtlState* ttl = db->ttl(cf).get();
  int64_t now = 0;
  if (ttl != nullptr) {
    rocksdb::Status st = ttl->AccessTime(&now);
    if (!st.ok()) return st;
  }
  return GuardStatus("merging a batch", [&]() -> rocksdb::Status {
    rocksdb::WriteBatch wb;
    rocksdb::ColumnFamilyHandle* h = db->handle(cf);
    std::string joined, scratch;
    const auto& order = batch.order();
    const auto& start = batch.group_start();
    for (size_t g = 0; g < batch.groups(); ++g) {
      joined.clear();
      for (size_t i = start[g]; i < start[g + 1]; ++i) {
        PrefetchAhead(values, order, i);
        if (i != start[g]) joined.push_back(kListDelimiter);
        if (ttl != nullptr) PutBE64(&joined, static_cast<uint64_t>(now));  // each element's stamp
        const int rc = EncodeColumnRow(values, order[i], codec, false, &joined, &scratch);
        if (rc != kBatchOk) return Invalid(err, rc, order[i]);
      }
      rocksdb::Status st = wb.Merge(h, batch.group_key(g), joined);
      if (!st.ok()) return st;
    }
    rocksdb::Status st = wb.Count() == 0 ? rocksdb::Status::OK() : db->Write(&wb);
    if (st.ok()) db->CountWrites(batch.rows());
    return st;
  });
}

namespace {

// Reads by iteration (DenseRead) when the batch asks for at least one key per kDenseRatio
// entries the column family holds (RocksDB's estimate: every version and operand counts, as
// the iterator steps over each): walking costs a step through the merged tables per entry, a
// sorted MultiGet a lookup per key in every table that may hold it (index search, filter
// probe, block hash, block cache lookup). Measured on a struct state of 800k keys in three
// tables (~944k entries), CPU per key: 1 key in 2 entries scan 0.26 µs / MultiGet 0.57, 1 in
// 4.7 0.44 / 0.63, 1 in 9.4 0.82 / 0.71: the two cost the same near 1 in 6.
constexpr double kDenseRatio = 6.0;
constexpr size_t kDenseMinGroups = 1024;
std::atomic<int> g_read_mode{kReadAuto};
// Reads taken each way (kReadPoint, kReadScan, kReadRuns), process-wide.
std::atomic<uint64_t> g_read_ways[3];

// How a batch of groups is read: kReadPoint, kReadScan (the merged iterator) or kReadRuns
// (run by run where SortedRuns may, else the merged iterator).
int ChooseRead(StateDB* db, rocksdb::ColumnFamilyHandle* h, size_t groups, int mode) {
  if (mode == kReadAuto) mode = g_read_mode.load(std::memory_order_relaxed);
  if (mode != kReadAuto) return groups > 0 ? mode : kReadPoint;
  if (groups < kDenseMinGroups) return kReadPoint;
  uint64_t entries = 0;
  if (!db->raw()->GetIntProperty(h, rocksdb::DB::Properties::kEstimateNumKeys, &entries)) {
    return kReadPoint;
  }
  return static_cast<double>(groups) * kDenseRatio >= static_cast<double>(entries) ? kReadRuns
                                                                                   : kReadPoint;
}

void CountWay(int way) { g_read_ways[way - 1].fetch_add(1, std::memory_order_relaxed); }

// Sorted MultiGets in bounded chunks; take(g, key, value or nullptr) for every group in order.
template <typename Take>
rocksdb::Status PointRead(StateDB* db, rocksdb::ColumnFamilyHandle* h,
                          const rocksdb::ReadOptions& ro, const KeyBatch& batch, Take&& take) {
  const size_t groups = batch.groups();
  std::vector<rocksdb::Slice> keys;
  std::vector<rocksdb::PinnableSlice> vals(std::min(groups, kMultiGetChunk));
  std::vector<rocksdb::Status> statuses(vals.size());
  for (size_t base = 0; base < groups; base += kMultiGetChunk) {
    const size_t m = std::min(kMultiGetChunk, groups - base);
    keys.clear();
    for (size_t g = base; g < base + m; ++g) keys.push_back(batch.group_key(g));
    for (size_t i = 0; i < m; ++i) vals[i].Reset();
    // Groups are in key order already, so RocksDB may skip its own sort.
    db->raw()->MultiGet(ro, h, m, keys.data(), vals.data(), statuses.data(), true);
    for (size_t i = 0; i < m; ++i) {
      if (!statuses[i].ok() && !statuses[i].IsNotFound()) return statuses[i];
      const rocksdb::Slice v = vals[i];
      rocksdb::Status st = take(base + i, keys[i], statuses[i].ok() ? &v : nullptr);
      if (!st.ok()) return st;
    }
  }
  return rocksdb::Status::OK();
}

// One forward iterator over the batch's key range, merged with the sorted keys: a wanted key
// a few entries ahead is stepped to, one further away sought. What it sees is what MultiGet
// sees (the iterator resolves merges, range and point tombstones the same way), as of one
// implicit snapshot taken when it is created.
template <typename Take>
rocksdb::Status MergedRead(StateDB* db, rocksdb::ColumnFamilyHandle* h, rocksdb::ReadOptions ro,
                           const KeyBatch& batch, Take&& take) {
  CountWay(kReadScan);
  const size_t groups = batch.groups();
  // Past the last key nothing is wanted: the bound keeps the iterator from loading more.
  std::string upper = batch.group_key(groups - 1).ToString();
  upper.push_back('\0');
  const rocksdb::Slice upper_slice(upper);
  ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db->raw()->NewIterator(ro, h));
  bool positioned = false;
  for (size_t g = 0; g < groups; ++g) {
    const rocksdb::Slice key = batch.group_key(g);
    if (!positioned) {
      it->Seek(key);
      positioned = true;
    } else {
      StepTo(it.get(), key);
    }
    if (!it->Valid() && !it->status().ok()) return it->status();
    if (it->Valid() && it->key() == key) {
      const rocksdb::Slice v = it->value();
      rocksdb::Status st = take(g, key, &v);
      if (!st.ok()) return st;
    } else {
      rocksdb::Status st = take(g, key, nullptr);
      if (!st.ok()) return st;
    }
  }
  return it->status();
}


// The batch's keys through SortedRuns (sorted_runs.h) where it may read them, else through
// the merged iterator; way kReadScan forces the latter.
template <typename Take>
rocksdb::Status DenseRead(StateDB* db, rocksdb::ColumnFamilyHandle* h,
                          const rocksdb::ReadOptions& ro, const KeyBatch& batch, int way,
                          Take&& take) {
  std::unique_ptr<SortedRuns> runs;
  if (way == kReadRuns && ro.snapshot == nullptr) {
    SortedRuns::Open(db, h, batch.group_key(0), batch.group_key(batch.groups() - 1), &runs);
  }
  if (runs == nullptr) return MergedRead(db, h, ro, batch, take);
  CountWay(kReadRuns);
  for (size_t g = 0; g < batch.groups(); ++g) {
    const rocksdb::Slice key = batch.group_key(g);
    bool found = false;
    rocksdb::Slice value;
    rocksdb::Status st = runs->Find(key, &found, &value);
    if (st.ok()) st = take(g, key, found ? &value : nullptr);
    if (!st.ok()) return st;
  }
  return rocksdb::Status::OK();
}

// A batch's groups read the way ChooseRead says.
template <typename Take>
rocksdb::Status ReadGroups(StateDB* db, rocksdb::ColumnFamilyHandle* h,
                           const rocksdb::ReadOptions& ro, const KeyBatch& batch, int mode,
                           Take&& take) {
  const int way = ChooseRead(db, h, batch.groups(), mode);
  if (way == kReadPoint) {
    CountWay(kReadPoint);
    return PointRead(db, h, ro, batch, take);
  }
  return DenseRead(db, h, ro, batch, way, take);
}
}  // namespace

int SetBatchReadMode(int mode) { return g_read_mode.exchange(mode); }

void BatchReadCounts(uint64_t out[3]) {
  for (int i = 0; i < 3; ++i) out[i] = g_read_ways[i].load(std::memory_order_relaxed);
}

void ReserveLike(std::string* data, size_t n) {
  constexpr size_t kCap = size_t{128} << 20;
  const size_t first = data->size();
  if (first == 0 || n <= 1) return;
  data->reserve(n > kCap / first ? kCap : first * n);
}

rocksdb::Status BatchGet(StateDB* db, int cf, const KeyBatch& batch, BatchValues* out,
                         bool write_back, int mode) {
  rocksdb::Status st =
      GetGroups(db, cf, batch, write_back ? GroupRead::kRead : GroupRead::kReadOnly, out, mode);
  if (st.ok()) db->CountReads(batch.rows());
  return st;
}

rocksdb::Status VisitBatch(StateDB* db, int cf, const KeyBatch& batch, GroupVisitor* visitor,
                           int mode) {
  if (db->ttl(cf) != nullptr) {
    return rocksdb::Status::InvalidArgument("VisitBatch: a state with TTL is read by BatchGet");
  }
  return GuardStatus("reading a batch", [&]() -> rocksdb::Status {
    const size_t groups = batch.groups();
    if (groups == 0) return rocksdb::Status::OK();
    rocksdb::ReadOptions ro;
    rocksdb::ColumnFamilyHandle* h = db->handle(cf);
    auto take = [&](size_t g, const rocksdb::Slice&, const rocksdb::Slice* value) {
      return visitor->Visit(g, value);
    };
    rocksdb::Status st = ReadGroups(db, h, ro, batch, mode, take);
    if (st.ok()) db->CountReads(batch.rows());
    return st;
  });
}

rocksdb::Status GetGroups(StateDB* db, int cf, const KeyBatch& batch, GroupRead how,
                          BatchValues* out, int mode) {
  const TtlState* ttl = how == GroupRead::kStored ? nullptr : db->ttl(cf).get();
  int64_t now = 0;
  if (ttl != nullptr) {
    rocksdb::Status st = ttl->AccessTime(&now);
    if (!st.ok()) return st;
  }
  return GuardStatus("reading a batch", [&]() -> rocksdb::Status {
    const size_t groups = batch.groups();
    rocksdb::WriteBatch writes;  // what TTL reads leave behind (cleanup, refreshed stamps)
    std::string rewrite;
    out->found.assign(groups, 0);
    out->data.clear();
    out->offsets.assign(1, 0);
    out->offsets.reserve(groups + 1);
    rocksdb::ReadOptions ro;
    rocksdb::ColumnFamilyHandle* h = db->handle(cf);
    // Group g's stored value (nullptr: none); groups come in key order.
    auto take = [&](size_t g, const rocksdb::Slice& key,
                    const rocksdb::Slice* value) -> rocksdb::Status {
      if (value != nullptr && ttl != nullptr) {
        TtlVerdict verdict;
        rocksdb::Status st = ttl->Read(*value, now, how == GroupRead::kRead, &verdict,
                                       &out->data, &rewrite);
        if (st.ok() && verdict.write_back == TtlWriteBack::kDelete) {
          st = writes.Delete(h, key);
        } else if (st.ok() && verdict.write_back == TtlWriteBack::kRewrite) {
          st = writes.Put(h, key, rewrite);
        }
        if (!st.ok()) return st;
        out->found[g] = verdict.visible ? 1 : 0;
      } else if (value != nullptr) {
        out->found[g] = 1;
        const bool first = out->data.empty();
        out->data.append(value->data(), value->size());
        if (first) ReserveLike(&out->data, groups - g);
      }
      out->offsets.push_back(out->data.size());
      return rocksdb::Status::OK();
    };
    rocksdb::Status st = ReadGroups(db, h, ro, batch, mode, take);
    if (!st.ok()) return st;
    return writes.Count() == 0 ? rocksdb::Status::OK() : db->Write(&writes);
  });
}

namespace {

template <typename T, typename Convert>
bool Scatter(const KeyBatch& batch, const BatchValues& values, Codec codec, bool skip_map_flag,
             T fill, T* out, uint8_t* found, BatchError* err, Convert convert) {
  const size_t groups = batch.groups();
  std::vector<T> per_group;
  std::vector<uint8_t> present;
  try {
    per_group.assign(groups, fill);
    present.assign(groups, 0);
  } catch (const std::bad_alloc&) {  // no exception may reach the bindings
    err->code = kBatchNoMemory;
    return false;
  }
  for (size_t g = 0; g < groups; ++g) {
    if (!values.found[g]) continue;
    present[g] = 1;
    rocksdb::Slice v = values.value(g);
    if (skip_map_flag) {
      if (v.empty()) {
        Invalid(err, kBatchCorrupt, batch.order()[batch.group_start()[g]]);
        return false;
      }
      if (v[0] == 1) continue;  // an entry whose value is None
      v.remove_prefix(1);
    }
    Number n;
    if (!ReadNumber(codec, v.data(), v.size(), &n)) {
      Invalid(err, kBatchCorrupt, batch.order()[batch.group_start()[g]]);
      return false;
    }
    per_group[g] = convert(n);
  }
  const auto& group_of = batch.group_of();
  for (size_t row = 0; row < batch.rows(); ++row) {
    out[row] = per_group[group_of[row]];
    found[row] = present[group_of[row]];
  }
  return true;
}

}  // namespace

bool ScatterInt64(const KeyBatch& batch, const BatchValues& values, Codec codec,
                  bool skip_map_flag, int64_t fill, int64_t* out, uint8_t* found,
                  BatchError* err) {
  return Scatter<int64_t>(batch, values, codec, skip_map_flag, fill, out, found, err,
                          [](const Number& n) { return n.is_int ? n.i : static_cast<int64_t>(n.d); });
}

bool ScatterFloat64(const KeyBatch& batch, const BatchValues& values, Codec codec,
                    bool skip_map_flag, double fill, double* out, uint8_t* found,
                    BatchError* err) {
  return Scatter<double>(batch, values, codec, skip_map_flag, fill, out, found, err,
                         [](const Number& n) { return n.AsDouble(); });
}

}  // namespace stateengine
