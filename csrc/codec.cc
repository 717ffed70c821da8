#include "codec.h"

#include "keygroups.h"

namespace stateengine {
namespace {

bool VarLength(const char* p, size_t n, size_t* len) {
  uint64_t body;
  const size_t head = GetVarint(p, n, &body);
  if (head == 0 || body > n - head) return false;
  *len = head + static_cast<size_t>(body);
  return true;
}

bool FixedLength(size_t width, size_t n, size_t* len) {
  if (n < width) return false;
  *len = width;
  return true;
}

// Length of the kAny element at p. Containers recurse at most kMaxAnyDepth levels, and each
// element takes at least one byte, so a count larger than the bytes left is malformed before
// any element is visited: the work is linear in n whatever the counts claim.
bool AnyLength(const char* p, size_t n, int depth, size_t* len) {
  if (n < 1) return false;
  size_t body = 0;
  switch (static_cast<uint8_t>(p[0])) {
    case kTagNone:
    case kTagFalse:
    case kTagTrue:
      *len = 1;
      return true;
    case kTagInt:
    case kTagFloat:
      if (!FixedLength(8, n - 1, &body)) return false;
      break;
    case kTagPickle:
      if (depth > 0) return false;  // only ever a whole value, never inside a container
      [[fallthrough]];
    case kTagStr:
    case kTagBytes:
      if (!VarLength(p + 1, n - 1, &body)) return false;
      break;
    case kTagBigInt: {
      // Only ints outside int64 take this tag, and those need at least 9 bytes.
      uint64_t size;
      const size_t head = GetVarint(p + 1, n - 1, &size);
      if (head == 0 || size < 9 || size > n - 1 - head) return false;
      body = head + static_cast<size_t>(size);
      break;
    }
    case kTagTuple:
    case kTagList:
    case kTagDict: {
      if (depth >= kMaxAnyDepth) return false;
      uint64_t count;
      const size_t head = GetVarint(p + 1, n - 1, &count);
      if (head == 0) return false;
      size_t pos = 1 + head;
      const size_t left = n - pos;
      if (p[0] == kTagDict) {
        if (count > left / 2) return false;
        count *= 2;
      } else if (count > left) {
        return false;
      }
      for (uint64_t i = 0; i < count; ++i) {
        size_t item = 0;
        if (!AnyLength(p + pos, n - pos, depth + 1, &item)) return false;
        pos += item;
      }
      *len = pos;
      return true;
    }
    default:
      return false;
  }
  *len = 1 + body;
  return true;
}

}  // namespace

bool ElementLength(Codec codec, const char* p, size_t n, size_t* len) {
  switch (codec) {
    case kVoid:
      if (n >= 1 && p[0] != 0) return false;  // the one byte VOID writes
      return FixedLength(1, n, len);
    case kI64:
    case kF64:
    case kOrdI64:
    case kOrdF64:
      return FixedLength(8, n, len);
    case kI32:
    case kF32:
      return FixedLength(4, n, len);
    case kBool:
      // Only 0 and 1 are written: another byte is damage, and as a key it would be a second
      // entry for the same boolean.
      if (n >= 1 && static_cast<unsigned char>(p[0]) > 1) return false;
      return FixedLength(1, n, len);
    case kStr:
    case kBytes:
    case kPickle:
      return VarLength(p, n, len);
    case kOrdStr:
    case kOrdBytes:
      *len = n;
      return true;
    case kAny:
      return AnyLength(p, n, 0, len);
    default:
      return false;
  }
}

bool IsNumericCodec(Codec codec) { return codec == kAny || codec == kI64 || codec == kF64; }

bool ReadNumber(Codec codec, const char* p, size_t n, Number* out) {
  switch (codec) {
    case kI64:
      if (n != 8) return false;
      out->is_int = true;
      out->i = static_cast<int64_t>(GetBE64(p));
      return true;
    case kF64:
      if (n != 8) return false;
      out->is_int = false;
      out->d = BitsDouble(GetBE64(p));
      return true;
    case kAny:
      if (n != 9) return false;
      if (p[0] == kTagInt) {
        out->is_int = true;
        out->i = static_cast<int64_t>(GetBE64(p + 1));
        return true;
      }
      if (p[0] == kTagFloat) {
        out->is_int = false;
        out->d = BitsDouble(GetBE64(p + 1));
        return true;
      }
      return false;
    default:
      return false;
  }
}

void WriteNumber(Codec codec, const Number& num, std::string* out) {
  switch (codec) {
    case kI64:
      PutBE64(out, static_cast<uint64_t>(num.is_int ? num.i : static_cast<int64_t>(num.d)));
      return;
    case kF64:
      PutBE64(out, DoubleBits(num.AsDouble()));
      return;
    default:  // kAny
      if (num.is_int) {
        out->push_back(static_cast<char>(kTagInt));
        PutBE64(out, static_cast<uint64_t>(num.i));
      } else {
        out->push_back(static_cast<char>(kTagFloat));
        PutBE64(out, DoubleBits(num.d));
      }
  }
}

bool IsKeyColumnCodec(Codec codec) {
  switch (codec) {
    case kI64:
    case kI32:
    case kF64:
    case kF32:
    case kBool:
    case kStr:
    case kBytes:
      return true;
    default:
      return false;
  }
}

KeySchema::KeySchema(std::vector<Codec> columns) : columns_(std::move(columns)) {
  for (Codec c : columns_) {
    if (c == kStr || c == kBytes) variable_length_ = true;
  }
}

bool KeySchema::Length(const char* p, size_t n, size_t* len) const {
  size_t pos = 0;
  for (Codec c : columns_) {
    size_t col = 0;
    if (!ElementLength(c, p + pos, n - pos, &col)) return false;
    pos += col;
  }
  *len = pos;
  return true;
}

bool KeySchema::Hash(const char* p, size_t n, int32_t* hash) const {
  int32_t h = kSparkHashSeed;
  size_t pos = 0;
  for (Codec c : columns_) {
    const char* q = p + pos;
    const size_t avail = n - pos;
    size_t len = 0;
    if (!ElementLength(c, q, avail, &len)) return false;
    switch (c) {
      case kI64:
        h = SparkHashLong(static_cast<int64_t>(GetBE64(q)), h);
        break;
      case kI32:
        h = SparkHashInt(static_cast<int32_t>(GetBE32(q)), h);
        break;
      case kF64:
        h = SparkHashDouble(BitsDouble(GetBE64(q)), h);
        break;
      case kF32: {
        const uint32_t bits = GetBE32(q);
        float f;
        std::memcpy(&f, &bits, 4);
        h = SparkHashFloat(f, h);
        break;
      }
      case kBool:
        h = SparkHashBool(q[0] != 0, h);
        break;
      case kStr:
      case kBytes: {
        uint64_t body = 0;
        const size_t head = GetVarint(q, avail, &body);
        h = SparkHashBytes(q + head, static_cast<size_t>(body), h);
        break;
      }
      default:
        return false;
    }
    pos += len;
  }
  if (pos != n) return false;
  *hash = h;
  return true;
}

}  // namespace stateengine
