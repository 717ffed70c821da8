// The struct (row) codec, kStruct: values of a Spark schema (stateengine/sparktypes.py), stored
// without tags because the schema, persisted as the state's value_schema attribute, says what
// each byte is. A RowSchema is that schema compiled once into a flat node table that the
// encoders and decoders (Cython for Python objects, arrow_rows.cc for Arrow columns) walk.
//
// Layout of a value of each node type (big-endian, like every other codec):
//   bigint 8 | int 4 | smallint 2 | tinyint 1 | double 8 (IEEE bits) | float 4 | boolean 1 (0/1)
//   string, binary: varint length + bytes (string: UTF-8)
//   decimal(p, s): u8 length L (1..16) + L bytes of the unscaled value, minimal two's complement
//   date: int32 days since 1970-01-01 | timestamp, timestamp_ntz: int64 microseconds since the
//   epoch (timestamp: UTC; timestamp_ntz: wall-clock time)
//   struct: null bitmap of ceil(fields / 8) bytes (bit i, LSB first, set = field i is null),
//           then every non-null field in order
//   array:  varint count, null bitmap of ceil(count / 8) bytes, then the non-null elements
//   map:    varint count, null bitmap over the values, then per entry its key (never null)
//           and its value if not null
// Invariant: a value is self-delimiting given its schema, and every walk over stored bytes
// checks each length and count against the bytes present before using it; recursion follows
// the schema (at most kMaxRowDepth levels), never the data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace stateengine {

enum RowType : uint8_t {
  kRowBigint = 1,
  kRowInt = 2,
  kRowSmallint = 3,
  kRowTinyint = 4,
  kRowDouble = 5,
  kRowFloat = 6,
  kRowString = 7,
  kRowBinary = 8,
  kRowBoolean = 9,
  kRowDecimal = 10,
  kRowDate = 11,
  kRowTimestamp = 12,
  kRowTimestampNtz = 13,
  kRowArray = 14,
  kRowMap = 15,
  kRowStruct = 16,
};

constexpr int kMaxRowDepth = 32;

// Spark's range of dates and timestamps (years 0001 to 9999), which Python's datetime shares:
// values outside it are refused when written, so every stored value reads back.
constexpr int32_t kMinDateDays = -719162;   // 0001-01-01
constexpr int32_t kMaxDateDays = 2932896;   // 9999-12-31
constexpr int64_t kMinTimestampMicros = -62135596800000000LL;  // 0001-01-01T00:00:00
constexpr int64_t kMaxTimestampMicros = 253402300799999999LL;  // 9999-12-31T23:59:59.999999

struct RowNode {
  uint8_t type = 0;
  bool nullable = true;
  uint8_t precision = 0;
  uint8_t scale = 0;
  uint32_t num_children = 0;
  uint32_t first_child = 0;  // index into RowSchema's child table
  uint32_t fixed_width = 0;  // bytes of a fixed-width scalar, 0 otherwise
};

class RowSchema {
 public:
  // Compiles the program stateengine.sparktypes.program() wrote: nodes in preorder, each
  // u8 type | u8 nullable | u8 precision | u8 scale | u32 children. False if malformed.
  bool Compile(const char* p, size_t n);

  const RowNode& node(uint32_t i) const { return nodes_[i]; }
  const RowNode* nodes() const { return nodes_.data(); }
  const uint32_t* children() const { return children_.data(); }
  uint32_t child(const RowNode& n, uint32_t i) const { return children_[n.first_child + i]; }
  size_t size() const { return nodes_.size(); }

  // Length of the value of node `node` that starts at p (n bytes available), checking its
  // structure: every count and length against the bytes present, booleans 0/1, decimals
  // canonical and within their precision, strings valid UTF-8. False if truncated or malformed.
  bool Length(uint32_t node, const char* p, size_t n, size_t* len) const;

 private:
  bool CompileNode(const char* p, size_t n, size_t* pos, int depth, uint32_t* index);

  std::vector<RowNode> nodes_;
  std::vector<uint32_t> children_;
};

// Whether the fixed-width value of a node of this type at p lies in Spark's range: dates and
// timestamps outside years 1..9999 are never written, so stored ones are corrupted (every
// other type: true).
bool InSparkRange(uint8_t type, const char* p);

// Bytes of a struct's or array's null bitmap.
inline size_t BitmapBytes(uint64_t count) { return static_cast<size_t>((count + 7) / 8); }
inline bool BitSet(const char* bitmap, uint64_t i) {
  return (static_cast<unsigned char>(bitmap[i >> 3]) >> (i & 7)) & 1;
}

// Whether [p, p + n) is valid UTF-8 (no surrogates, no overlong forms, at most U+10FFFF).
bool ValidUtf8(const char* p, size_t n);

// Decimal unscaled values up to 38 digits, as 128-bit two's complement.
using Int128 = __int128;
// Appends the minimal big-endian two's complement of v with its u8 length.
void PutDecimal(Int128 v, std::string* out);
// Reads a decimal encoding at p; false unless it is canonical (minimal) and |v| < 10^precision.
bool GetDecimal(const char* p, size_t n, int precision, Int128* v, size_t* len);
// Whether |v| < 10^precision.
bool DecimalFits(Int128 v, int precision);

}  // namespace stateengine
