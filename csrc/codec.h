// Byte encodings of keys, namespaces and values. The ids are persisted in snapshot metas.
// Invariant: every codec except the Ord* ones is self-delimiting (a reader knows where an
// element ends without a delimiter); Ord* codecs sort bytewise like their values and are only
// used as the last component of a RocksDB key (SortedMapState user keys).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace stateengine {

// Plain integer ids (not an enum class) so bindings and persisted metas use them directly.
using Codec = uint8_t;
constexpr Codec kVoid = 0;       // namespace only: one 0x00 byte
constexpr Codec kAny = 1;        // one tag byte, then the tagged type's standard encoding
constexpr Codec kI64 = 2;        // 8 bytes big-endian two's complement
constexpr Codec kF64 = 3;        // IEEE-754 bits, 8 bytes big-endian
constexpr Codec kStr = 4;        // varint length + UTF-8
constexpr Codec kBytes = 5;      // varint length + raw bytes
constexpr Codec kBool = 6;       // one byte 0/1
constexpr Codec kPickle = 7;     // varint length + pickle
constexpr Codec kI32 = 8;        // 4 bytes big-endian
constexpr Codec kF32 = 9;        // IEEE-754 bits, 4 bytes big-endian
constexpr Codec kOrdI64 = 10;    // sign bit flipped, big-endian: bytewise order == numeric order
constexpr Codec kOrdF64 = 11;    // IEEE bits transformed so bytewise order == numeric order
constexpr Codec kOrdStr = 12;    // raw UTF-8 (bytewise order == code point order), not delimited
constexpr Codec kOrdBytes = 13;  // raw bytes, not self-delimiting
constexpr Codec kStruct = 14;    // a value of a Spark schema (row_codec.h): self-delimiting
                                 // given that schema, which the state's meta persists
constexpr Codec kCodecCount = 15;

// Tags of the kAny codec; persisted, so a value never changes meaning. Tags 8-11 (format 2)
// hold containers natively: their elements are kAny encodings themselves (never kTagPickle),
// each count is a varint bounded by the bytes that follow, and nesting stops at kMaxAnyDepth.
enum AnyTag : uint8_t {
  kTagNone = 0,
  kTagInt = 1,     // int64, 8 bytes big-endian
  kTagFloat = 2,   // IEEE-754 bits, 8 bytes big-endian
  kTagStr = 3,     // varint length + UTF-8
  kTagBytes = 4,   // varint length + raw bytes
  kTagFalse = 5,
  kTagTrue = 6,
  kTagPickle = 7,  // varint length + pickle: written before format 2 only, read on opt-in
  kTagBigInt = 8,  // varint length + minimal big-endian two's complement (ints beyond int64)
  kTagTuple = 9,   // varint count + count elements
  kTagList = 10,   // varint count + count elements
  kTagDict = 11,   // varint count + count (key, value) element pairs
};

// Containers nest at most this deep; deeper input is refused on write and malformed on read.
constexpr int kMaxAnyDepth = 64;

// ---- primitive writers/readers (inline: they sit in every hot loop) ----

// Store* write into memory the caller sized; Put* append to a string.
// One load or store and a byte swap: GCC 12 at -O2 compiles the byte-by-byte loops these
// replaced into eight iterations each, on every key and fixed-width value a batch touches.
inline uint64_t ToBigEndian64(uint64_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return v;
#else
  return __builtin_bswap64(v);
#endif
}

inline void StoreBE64(char* out, uint64_t v) {
  v = ToBigEndian64(v);
  std::memcpy(out, &v, 8);
}

inline void StoreBE32(char* out, uint32_t v) {
  out[0] = static_cast<char>(v >> 24);
  out[1] = static_cast<char>(v >> 16);
  out[2] = static_cast<char>(v >> 8);
  out[3] = static_cast<char>(v);
}

inline void PutBE64(std::string* out, uint64_t v) {
  char b[8];
  StoreBE64(b, v);
  out->append(b, 8);
}

inline void PutBE32(std::string* out, uint32_t v) {
  char b[4];
  StoreBE32(b, v);
  out->append(b, 4);
}

inline uint64_t GetBE64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return ToBigEndian64(v);  // the swap is its own inverse
}

inline uint32_t GetBE32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | u[3];
}

inline void PutVarint(std::string* out, uint64_t v) {
  char b[10];
  int n = 0;
  while (v >= 0x80) {
    b[n++] = static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  b[n++] = static_cast<char>(v);
  out->append(b, n);
}

// Returns bytes consumed, 0 if truncated, longer than 10 bytes or not the minimal encoding
// PutVarint writes (a zero last byte after others, bits beyond 64): a decoder that accepted
// those would read one value from several byte strings, and equal values must have equal
// bytes (map keys, namespaces).
inline size_t GetVarint(const char* p, size_t n, uint64_t* v) {
  uint64_t result = 0;
  for (size_t i = 0; i < n && i < 10; ++i) {
    const auto b = static_cast<unsigned char>(p[i]);
    result |= static_cast<uint64_t>(b & 0x7F) << (7 * i);
    if ((b & 0x80) == 0) {
      if ((i > 0 && b == 0) || (i == 9 && b > 1)) return 0;
      *v = result;
      return i + 1;
    }
  }
  return 0;
}

inline uint64_t DoubleBits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}
inline double BitsDouble(uint64_t u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}

// Keys compare by value, so -0.0 == 0.0 and every NaN is one key (as in Spark's grouping).
inline double NormalizeKeyDouble(double d) {
  if (d == 0.0) return 0.0;
  if (d != d) return BitsDouble(0x7ff8000000000000ULL);
  return d;
}

inline uint64_t OrderedI64(int64_t v) { return static_cast<uint64_t>(v) ^ (1ULL << 63); }
inline int64_t FromOrderedI64(uint64_t u) { return static_cast<int64_t>(u ^ (1ULL << 63)); }
inline uint64_t OrderedF64(double d) {
  const uint64_t u = DoubleBits(NormalizeKeyDouble(d));
  return (u & (1ULL << 63)) ? ~u : (u | (1ULL << 63));
}
inline double FromOrderedF64(uint64_t u) {
  return BitsDouble((u & (1ULL << 63)) ? (u & ~(1ULL << 63)) : ~u);
}

// Length of the element that starts at p (at most n bytes available) under a self-delimiting
// codec. Returns false if the bytes are truncated or malformed. kStruct needs its schema:
// RowSchema::Length (row_codec.h) is its ElementLength.
bool ElementLength(Codec codec, const char* p, size_t n, size_t* len);

// A number read from a value encoding: the numeric merge operators work on these.
struct Number {
  bool is_int = true;
  int64_t i = 0;
  double d = 0.0;
  double AsDouble() const { return is_int ? static_cast<double>(i) : d; }
};
bool ReadNumber(Codec codec, const char* p, size_t n, Number* out);
void WriteNumber(Codec codec, const Number& num, std::string* out);
bool IsNumericCodec(Codec codec);

// The key serializer of a backend: one or more columns (a multi-column Spark key).
class KeySchema {
 public:
  KeySchema() = default;
  explicit KeySchema(std::vector<Codec> columns);
  const std::vector<Codec>& columns() const { return columns_; }
  bool empty() const { return columns_.empty(); }
  bool variable_length() const { return variable_length_; }
  // Spark hash() of the key encoded at [p, p+n), chaining the seed through the columns.
  // Returns false unless exactly n bytes form one key of this schema.
  bool Hash(const char* p, size_t n, int32_t* hash) const;
  // Length of the key that starts at p; false if malformed.
  bool Length(const char* p, size_t n, size_t* len) const;

 private:
  std::vector<Codec> columns_;
  bool variable_length_ = false;
};

bool IsKeyColumnCodec(Codec codec);

}  // namespace stateengine
