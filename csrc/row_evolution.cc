#include "row_evolution.h"

#include <cstring>

#include "codec.h"

namespace stateengine {
namespace {

enum : uint8_t { kOpCopy = 1, kOpWiden = 2, kOpStruct = 3, kOpArray = 4, kOpMap = 5 };
enum : uint8_t { kSourceOld = 0, kSourceNull = 1, kSourceDefault = 2 };

bool IsInteger(uint8_t t) {
  return t == kRowTinyint || t == kRowSmallint || t == kRowInt || t == kRowBigint;
}

int IntegerWidth(uint8_t t) {
  switch (t) {
    case kRowTinyint: return 1;
    case kRowSmallint: return 2;
    case kRowInt: return 4;
    default: return 8;
  }
}

// Whether an old scalar of type from may widen to `to` (evolution._widening).
bool Widens(uint8_t from, uint8_t to) {
  if (IsInteger(from) && IsInteger(to)) return IntegerWidth(to) > IntegerWidth(from);
  return to == kRowDouble && (IsInteger(from) || from == kRowFloat);
}

int64_t ReadInteger(uint8_t t, const char* p) {
  switch (t) {
    case kRowTinyint: return static_cast<int8_t>(p[0]);
    case kRowSmallint:
      return static_cast<int16_t>((static_cast<unsigned char>(p[0]) << 8) |
                                  static_cast<unsigned char>(p[1]));
    case kRowInt: return static_cast<int32_t>(GetBE32(p));
    default: return static_cast<int64_t>(GetBE64(p));
  }
}

void WriteInteger(uint8_t t, int64_t v, std::string* out) {
  switch (t) {
    case kRowSmallint:
      out->push_back(static_cast<char>((static_cast<uint16_t>(v) >> 8) & 0xFF));
      out->push_back(static_cast<char>(v & 0xFF));
      break;
    case kRowInt: PutBE32(out, static_cast<uint32_t>(static_cast<int32_t>(v))); break;
    default: PutBE64(out, static_cast<uint64_t>(v)); break;
  }
}

// evolution.escape_of: the bytes no encoding of version 0's root begins with (false: none).
bool EscapeOf(const RowSchema& schema, std::string* out) {
  const RowNode& root = schema.node(0);
  switch (root.type) {
    case kRowStruct: {
      const uint32_t n = root.num_children;
      out->assign(BitmapBytes(n), '\xff');
      bool all_nullable = n % 8 == 0;
      for (uint32_t i = 0; all_nullable && i < n; ++i) {
        all_nullable = schema.node(schema.child(root, i)).nullable;
      }
      if (all_nullable) out->push_back('\xfe');  // the all-null value is 0xFF x n/8 alone
      return true;
    }
    case kRowArray:
    case kRowMap:
      out->assign("\x80\x00", 2);  // a varint with a redundant zero byte, never written
      return true;
    case kRowDecimal:
      out->assign(1, '\xff');  // a length byte above 16
      return true;
    default:
      return false;
  }
}

}  // namespace

bool RowUpgrade::Compile(const RowSchema* old_schema, const RowSchema* new_schema,
                         const char* plan, size_t n) {
  old_ = old_schema;
  new_ = new_schema;
  ops_.clear();
  fields_.clear();
  defaults_.clear();
  size_t pos = 0;
  uint32_t root = 0;
  return old_schema->size() > 0 && new_schema->size() > 0 &&
         CompileOp(plan, n, &pos, 0, 0, 1, &root) && pos == n;
}

bool RowUpgrade::SameLayout(uint32_t old_node, uint32_t new_node, int depth) const {
  const RowNode& o = old_->node(old_node);
  const RowNode& w = new_->node(new_node);
  if (depth > kMaxRowDepth || o.type != w.type || o.num_children != w.num_children) return false;
  if (o.type == kRowDecimal) return w.scale == o.scale && w.precision >= o.precision;
  for (uint32_t i = 0; i < o.num_children; ++i) {
    const uint32_t oc = old_->child(o, i), wc = new_->child(w, i);
    // a null the old value may hold must stay allowed (map keys are never null)
    if (old_->node(oc).nullable && !new_->node(wc).nullable) return false;
    if (!SameLayout(oc, wc, depth + 1)) return false;
  }
  return true;
}

bool RowUpgrade::CompileOp(const char* p, size_t n, size_t* pos, uint32_t old_node,
                           uint32_t new_node, int depth, uint32_t* index) {
  if (depth > kMaxRowDepth || *pos >= n) return false;
  const RowNode& old = old_->node(old_node);
  const RowNode& neu = new_->node(new_node);
  Op op;
  op.code = static_cast<uint8_t>(p[(*pos)++]);
  *index = static_cast<uint32_t>(ops_.size());
  ops_.push_back(op);
  switch (op.code) {
    case kOpCopy:
      return SameLayout(old_node, new_node, depth);
    case kOpWiden: {
      if (*pos >= n) return false;
      const auto to = static_cast<uint8_t>(p[(*pos)++]);
      if (!Widens(old.type, to) || neu.type != to) return false;
      ops_[*index].to = to;
      return true;
    }
    case kOpArray:
    case kOpMap: {
      const uint8_t type = op.code == kOpArray ? kRowArray : kRowMap;
      if (old.type != type || neu.type != type) return false;
      const uint32_t k = op.code == kOpArray ? 0 : 1;
      const uint32_t oe = old_->child(old, k), ne = new_->child(neu, k);
      if (old_->node(oe).nullable && !new_->node(ne).nullable) return false;
      if (op.code == kOpMap && !SameLayout(old_->child(old, 0), new_->child(neu, 0), depth + 1)) {
        return false;  // keys are copied
      }
      uint32_t child = 0;
      if (!CompileOp(p, n, pos, oe, ne, depth + 1, &child)) return false;
      ops_[*index].first = child;
      return true;
    }
    case kOpStruct: {
      if (old.type != kRowStruct || neu.type != kRowStruct || n - *pos < 4) return false;
      const uint32_t num = GetBE32(p + *pos);
      *pos += 4;
      if (num != neu.num_children) return false;
      const auto first = static_cast<uint32_t>(fields_.size());
      fields_.resize(fields_.size() + num);
      for (uint32_t i = 0; i < num; ++i) {
        if (*pos >= n) return false;
        const uint32_t field_node = new_->child(neu, i);
        const bool nullable = new_->node(field_node).nullable;
        Field f;
        f.source = static_cast<uint8_t>(p[(*pos)++]);
        if (f.source == kSourceOld) {
          if (n - *pos < 4) return false;
          f.old_index = GetBE32(p + *pos);
          *pos += 4;
          if (f.old_index >= old.num_children) return false;
          const uint32_t old_field = old_->child(old, f.old_index);
          if (old_->node(old_field).nullable && !nullable) return false;
          if (!CompileOp(p, n, pos, old_field, field_node, depth + 1, &f.op)) return false;
        } else if (f.source == kSourceDefault) {
          if (n - *pos < 4) return false;
          f.length = GetBE32(p + *pos);
          *pos += 4;
          size_t len = 0;
          if (f.length == 0 || f.length > n - *pos ||
              !new_->Length(field_node, p + *pos, f.length, &len) || len != f.length) {
            return false;  // a default must be one valid value of its field
          }
          f.offset = static_cast<uint32_t>(defaults_.size());
          defaults_.append(p + *pos, f.length);
          *pos += f.length;
        } else if (f.source != kSourceNull || !nullable) {
          return false;
        }
        fields_[first + i] = f;
      }
      ops_[*index].first = first;
      ops_[*index].num = num;
      return true;
    }
    default:
      return false;
  }
}

bool RowUpgrade::Apply(const char* p, size_t n, std::string* out) const {
  size_t used = 0;
  return ApplyOp(0, 0, p, n, out, &used);
}

bool RowUpgrade::ApplyOp(uint32_t index, uint32_t old_node, const char* p, size_t n,
                         std::string* out, size_t* used) const {
  const Op& op = ops_[index];
  const RowNode& old = old_->node(old_node);
  switch (op.code) {
    case kOpCopy:
      if (!old_->Length(old_node, p, n, used)) return false;
      out->append(p, *used);
      return true;
    case kOpWiden: {
      if (n < old.fixed_width) return false;
      *used = old.fixed_width;
      if (op.to == kRowDouble) {
        const double d = old.type == kRowFloat
                             ? static_cast<double>([&] {
                                 float f;
                                 const uint32_t bits = GetBE32(p);
                                 std::memcpy(&f, &bits, 4);
                                 return f;
                               }())
                             : static_cast<double>(ReadInteger(old.type, p));
        PutBE64(out, DoubleBits(d));
      } else {
        WriteInteger(op.to, ReadInteger(old.type, p), out);
      }
      return true;
    }
    case kOpStruct: {
      // Where each old field lies (absent: null), then the new fields in their order.
      const uint32_t m = old.num_children;
      const size_t bitmap = BitmapBytes(m);
      if (n < bitmap) return false;
      std::vector<std::pair<size_t, size_t>> at(m, {0, SIZE_MAX});
      size_t pos = bitmap;
      for (uint32_t j = 0; j < m; ++j) {
        if (BitSet(p, j)) continue;
        size_t len = 0;
        if (!old_->Length(old_->child(old, j), p + pos, n - pos, &len)) return false;
        at[j] = {pos, len};
        pos += len;
      }
      *used = pos;
      const size_t head = out->size();
      out->append(BitmapBytes(op.num), '\0');
      for (uint32_t i = 0; i < op.num; ++i) {
        const Field& f = fields_[op.first + i];
        const bool null = f.source == kSourceNull ||
                          (f.source == kSourceOld && at[f.old_index].second == SIZE_MAX);
        if (null) {
          (*out)[head + (i >> 3)] = static_cast<char>((*out)[head + (i >> 3)] | (1 << (i & 7)));
        } else if (f.source == kSourceDefault) {
          out->append(defaults_, f.offset, f.length);
        } else {
          size_t item = 0;
          const auto& [start, len] = at[f.old_index];
          if (!ApplyOp(f.op, old_->child(old, f.old_index), p + start, len, out, &item) ||
              item != len) {
            return false;
          }
        }
      }
      return true;
    }
    case kOpArray:
    case kOpMap: {
      // Count and null bitmap stay as they are; keys are copied; elements or values upgraded.
      uint64_t count;
      const size_t head = GetVarint(p, n, &count);
      if (head == 0 || count > static_cast<uint64_t>(n - head) * 8) return false;
      const size_t bitmap = BitmapBytes(count);
      size_t pos = head + bitmap;
      out->append(p, pos);
      const char* bits = p + head;
      const bool map = op.code == kOpMap;
      const uint32_t elem = old_->child(old, map ? 1 : 0);
      for (uint64_t e = 0; e < count; ++e) {
        size_t item = 0;
        if (map) {
          if (!old_->Length(old_->child(old, 0), p + pos, n - pos, &item)) return false;
          out->append(p + pos, item);
          pos += item;
        }
        if (BitSet(bits, e)) continue;
        if (!ApplyOp(op.first, elem, p + pos, n - pos, out, &item)) return false;
        pos += item;
      }
      *used = pos;
      return true;
    }
    default:
      return false;
  }
}

bool RowVersions::Build(const char* spec, size_t n) {
  schemas_.clear();
  upgrades_.clear();
  direct_.clear();
  if (n < 10) return false;
  const uint32_t count = GetBE32(spec);
  const uint32_t write_id = GetBE32(spec + 4);
  const size_t escape = (static_cast<unsigned char>(spec[8]) << 8) |
                        static_cast<unsigned char>(spec[9]);
  size_t pos = 10;
  // A version takes 9 bytes of the spec at least, and markers need an escape.
  if (count < 2 || count > (n - pos) / 9 || write_id >= count || escape == 0 ||
      escape > n - pos) {
    return false;
  }
  escape_.assign(spec + pos, escape);
  pos += escape;
  // (offset, length) in spec of each version's program and plan: plans are compiled once
  // the current schema is known
  std::vector<std::pair<size_t, size_t>> programs, plans;
  for (uint32_t v = 0; v < count; ++v) {
    if (n - pos < 4) return false;
    const uint32_t len = GetBE32(spec + pos);
    pos += 4;
    if (len > n - pos) return false;
    auto schema = std::make_unique<RowSchema>();
    if (!schema->Compile(spec + pos, len)) return false;
    programs.emplace_back(pos, len);
    pos += len;
    if (n - pos < 5) return false;
    const bool direct = spec[pos] != 0;
    const uint32_t plan = GetBE32(spec + pos + 1);
    pos += 5;
    if (plan > n - pos || direct != (plan == 0)) return false;
    plans.emplace_back(pos, plan);
    pos += plan;
    schemas_.push_back(std::move(schema));
    direct_.push_back(direct ? 1 : 0);
  }
  if (pos != n || !direct_.back()) return false;
  // The escape is version 0's (else an unmarked old value could read as a marker), and the
  // version written now is laid out exactly as the current schema: what is written reads
  // back as itself, and with no marker (write id 0) it is a version-0 value.
  std::string expected;
  if (!EscapeOf(*schemas_[0], &expected) || expected != escape_) return false;
  const auto& [now_at, now_len] = programs.back();
  const auto& [w_at, w_len] = programs[write_id];
  if (!direct_[write_id] || w_len != now_len ||
      std::memcmp(spec + w_at, spec + now_at, now_len) != 0) {
    return false;
  }
  const RowSchema& now = *schemas_.back();
  for (uint32_t v = 0; v < count; ++v) {
    std::unique_ptr<RowUpgrade> upgrade;
    if (direct_[v]) {
      // read as the current schema's bytes: only right if they are laid out alike
      RowUpgrade same;
      if (!same.Compile(schemas_[v].get(), &now, "\x01", 1)) return false;
    } else {
      upgrade = std::make_unique<RowUpgrade>();
      if (!upgrade->Compile(schemas_[v].get(), &now, spec + plans[v].first, plans[v].second)) {
        return false;
      }
    }
    upgrades_.push_back(std::move(upgrade));
  }
  write_prefix_.clear();
  if (write_id != 0) {
    write_prefix_ = escape_;
    PutVarint(&write_prefix_, write_id);
  }
  return true;
}

bool RowVersions::Classify(const char* p, size_t n, uint32_t* version, size_t* marker) const {
  const size_t e = escape_.size();
  if (n <= e || std::memcmp(p, escape_.data(), e) != 0) {
    *version = 0;
    *marker = 0;
    return true;
  }
  uint64_t id;
  const size_t head = GetVarint(p + e, n - e, &id);
  if (head == 0 || id == 0 || id >= schemas_.size()) return false;
  *version = static_cast<uint32_t>(id);
  *marker = e + head;
  return true;
}

bool RowVersions::Length(const char* p, size_t n, size_t* len) const {
  uint32_t v;
  size_t marker;
  size_t body = 0;
  if (!Classify(p, n, &v, &marker) || !schemas_[v]->Length(0, p + marker, n - marker, &body)) {
    return false;
  }
  *len = marker + body;
  return true;
}

bool RowVersions::ReadMarked(const char* p, size_t n, bool whole, std::string* scratch,
                             size_t* marker, bool* upgraded, size_t* old_len) const {
  uint32_t v;
  if (!Classify(p, n, &v, marker)) return false;
  if (direct_[v]) {
    *upgraded = false;
    return true;
  }
  const char* q = p + *marker;
  const size_t m = n - *marker;
  if (!schemas_[v]->Length(0, q, m, old_len) || (whole && *old_len != m)) return false;
  scratch->clear();
  *upgraded = true;
  return upgrades_[v]->Apply(q, *old_len, scratch);
}

}  // namespace stateengine
