#include "row_codec.h"

#include "codec.h"

namespace stateengine {
namespace {

constexpr size_t kProgramNode = 8;  // u8 type | u8 nullable | u8 precision | u8 scale | u32

uint32_t FixedWidth(uint8_t type) {
  switch (type) {
    case kRowBigint:
    case kRowDouble:
    case kRowTimestamp:
    case kRowTimestampNtz:
      return 8;
    case kRowInt:
    case kRowFloat:
    case kRowDate:
      return 4;
    case kRowSmallint:
      return 2;
    case kRowTinyint:
    case kRowBoolean:
      return 1;
    default:
      return 0;
  }
}

Int128 Pow10(int k) {
  Int128 r = 1;
  for (int i = 0; i < k; ++i) r *= 10;
  return r;
}

}  // namespace

bool InSparkRange(uint8_t type, const char* p) {
  if (type == kRowDate) {
    const auto days = static_cast<int32_t>(GetBE32(p));
    return days >= kMinDateDays && days <= kMaxDateDays;
  }
  if (type == kRowTimestamp || type == kRowTimestampNtz) {
    const auto us = static_cast<int64_t>(GetBE64(p));
    return us >= kMinTimestampMicros && us <= kMaxTimestampMicros;
  }
  return true;
}

bool RowSchema::Compile(const char* p, size_t n) {
  nodes_.clear();
  children_.clear();
  size_t pos = 0;
  uint32_t root = 0;
  if (!CompileNode(p, n, &pos, 1, &root)) return false;
  return pos == n && root == 0;
}

bool RowSchema::CompileNode(const char* p, size_t n, size_t* pos, int depth, uint32_t* index) {
  if (depth > kMaxRowDepth || n - *pos < kProgramNode) return false;
  const char* q = p + *pos;
  RowNode node;
  node.type = static_cast<uint8_t>(q[0]);
  node.nullable = q[1] != 0;
  node.precision = static_cast<uint8_t>(q[2]);
  node.scale = static_cast<uint8_t>(q[3]);
  node.num_children = GetBE32(q + 4);
  node.fixed_width = FixedWidth(node.type);
  *pos += kProgramNode;
  switch (node.type) {
    case kRowArray:
      if (node.num_children != 1) return false;
      break;
    case kRowMap:
      if (node.num_children != 2) return false;
      break;
    case kRowStruct:
      // Each field takes a program node: a count beyond the bytes left is malformed.
      if (node.num_children == 0 || node.num_children > (n - *pos) / kProgramNode) return false;
      break;
    case kRowDecimal:
      if (node.precision < 1 || node.precision > 38 || node.scale > node.precision ||
          node.num_children != 0) {
        return false;
      }
      break;
    default:
      if (node.type < kRowBigint || node.type > kRowTimestampNtz || node.num_children != 0) {
        return false;
      }
  }
  *index = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back(node);
  // Children are compiled first and their indexes then stored contiguously, so a node's
  // children are children_[first_child .. first_child + num_children).
  std::vector<uint32_t> kids(node.num_children);
  for (uint32_t i = 0; i < node.num_children; ++i) {
    if (!CompileNode(p, n, pos, depth + 1, &kids[i])) return false;
  }
  nodes_[*index].first_child = static_cast<uint32_t>(children_.size());
  children_.insert(children_.end(), kids.begin(), kids.end());
  return true;
}

bool RowSchema::Length(uint32_t index, const char* p, size_t n, size_t* len) const {
  const RowNode& node = nodes_[index];
  if (node.fixed_width != 0) {
    if (n < node.fixed_width) return false;
    if (node.type == kRowBoolean && static_cast<unsigned char>(p[0]) > 1) return false;
    if (!InSparkRange(node.type, p)) return false;
    *len = node.fixed_width;
    return true;
  }
  switch (node.type) {
    case kRowString:
    case kRowBinary: {
      uint64_t body;
      const size_t head = GetVarint(p, n, &body);
      if (head == 0 || body > n - head) return false;
      if (node.type == kRowString && !ValidUtf8(p + head, static_cast<size_t>(body))) return false;
      *len = head + static_cast<size_t>(body);
      return true;
    }
    case kRowDecimal: {
      Int128 v;
      return GetDecimal(p, n, node.precision, &v, len);
    }
    case kRowStruct: {
      const size_t bitmap = BitmapBytes(node.num_children);
      if (n < bitmap) return false;
      size_t pos = bitmap;
      for (uint32_t i = 0; i < node.num_children; ++i) {
        if (BitSet(p, i)) {
          if (!nodes_[child(node, i)].nullable) return false;
          continue;
        }
        size_t item = 0;
        if (!Length(child(node, i), p + pos, n - pos, &item)) return false;
        pos += item;
      }
      // Bits past the last field are zero in a canonical encoding.
      if ((node.num_children & 7) != 0 &&
          (static_cast<unsigned char>(p[bitmap - 1]) >> (node.num_children & 7)) != 0) {
        return false;
      }
      *len = pos;
      return true;
    }
    case kRowArray:
    case kRowMap: {
      uint64_t count;
      const size_t head = GetVarint(p, n, &count);
      if (head == 0) return false;
      size_t pos = head;
      // The bitmap alone takes a byte per 8 entries: a count beyond that is malformed before
      // anything is visited.
      if (count > static_cast<uint64_t>(n - pos) * 8) return false;
      const size_t bitmap = BitmapBytes(count);
      const char* bits = p + pos;
      pos += bitmap;
      const uint32_t elem = child(node, node.type == kRowMap ? 1 : 0);
      const bool elem_nullable = nodes_[elem].nullable;
      for (uint64_t i = 0; i < count; ++i) {
        size_t item = 0;
        if (node.type == kRowMap) {
          if (!Length(child(node, 0), p + pos, n - pos, &item)) return false;
          pos += item;
        }
        if (BitSet(bits, i)) {
          if (!elem_nullable) return false;
          continue;
        }
        if (!Length(elem, p + pos, n - pos, &item)) return false;
        pos += item;
      }
      if ((count & 7) != 0 && (static_cast<unsigned char>(bits[bitmap - 1]) >> (count & 7)) != 0) {
        return false;
      }
      *len = pos;
      return true;
    }
    default:
      return false;
  }
}

bool ValidUtf8(const char* p, size_t n) {
  const auto* s = reinterpret_cast<const unsigned char*>(p);
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t extra;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (n - i <= extra) return false;
    for (size_t k = 1; k <= extra; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

bool DecimalFits(Int128 v, int precision) {
  const Int128 bound = Pow10(precision);
  return v < bound && v > -bound;
}

void PutDecimal(Int128 v, std::string* out) {
  // Minimal two's complement: drop leading bytes that only repeat the sign.
  unsigned char b[16];
  for (int i = 15; i >= 0; --i) {
    b[i] = static_cast<unsigned char>(static_cast<uint64_t>(v & 0xFF));
    v >>= 8;  // arithmetic shift: the sign is kept
  }
  int start = 0;
  while (start < 15) {
    const bool redundant = (b[start] == 0x00 && (b[start + 1] & 0x80) == 0) ||
                           (b[start] == 0xFF && (b[start + 1] & 0x80) != 0);
    if (!redundant) break;
    ++start;
  }
  out->push_back(static_cast<char>(16 - start));
  out->append(reinterpret_cast<const char*>(b + start), static_cast<size_t>(16 - start));
}

bool GetDecimal(const char* p, size_t n, int precision, Int128* v, size_t* len) {
  if (n < 1) return false;
  const size_t size = static_cast<unsigned char>(p[0]);
  if (size < 1 || size > 16 || size > n - 1) return false;
  const auto* b = reinterpret_cast<const unsigned char*>(p + 1);
  if (size > 1 && ((b[0] == 0x00 && (b[1] & 0x80) == 0) || (b[0] == 0xFF && (b[1] & 0x80) != 0))) {
    return false;  // not minimal: equal values must have equal bytes (map keys)
  }
  Int128 r = (b[0] & 0x80) ? -1 : 0;
  for (size_t i = 0; i < size; ++i) r = static_cast<Int128>((static_cast<unsigned __int128>(r) << 8) | b[i]);
  if (!DecimalFits(r, precision)) return false;
  *v = r;
  *len = 1 + size;
  return true;
}

}  // namespace stateengine
