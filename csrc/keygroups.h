// Key groups: Spark-compatible hashing and Flink's key-group arithmetic.
// Invariant: KeyGroupForHash(h, maxP) == Spark SQL pmod(h, maxP) where h is Spark's hash()
// (Murmur3 x86_32, seed 42, Spark's per-type rules); ranges and owners follow Flink exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace stateengine {

constexpr int32_t kSparkHashSeed = 42;
constexpr int32_t kMaxMaxParallelism = 32768;

// Spark's Murmur3_x86_32 primitives, as used by its hash() expression.
int32_t SparkHashInt(int32_t value, int32_t seed);
int32_t SparkHashLong(int64_t value, int32_t seed);
// Spark's hashUnsafeBytes: 4-byte little-endian words, then each trailing byte (sign-extended)
// mixed as a whole word. Not the textbook Murmur3 tail; Spark relies on this for string/binary.
int32_t SparkHashBytes(const char* data, size_t len, int32_t seed);
// Spark hashes -0.0 as 0.0 and NaN through Java's canonical NaN bits.
int32_t SparkHashDouble(double value, int32_t seed);
int32_t SparkHashFloat(float value, int32_t seed);
inline int32_t SparkHashBool(bool value, int32_t seed) { return SparkHashInt(value ? 1 : 0, seed); }

inline int32_t PMod(int32_t a, int32_t n) {
  int32_t r = a % n;
  return r < 0 ? r + n : r;
}

inline int32_t KeyGroupForHash(int32_t hash, int32_t max_parallelism) {
  return PMod(hash, max_parallelism);
}

// Flink's KeyGroupRangeAssignment: operator i of p owns [start, end] (inclusive).
inline int32_t RangeStartForOperator(int32_t op, int32_t parallelism, int32_t max_parallelism) {
  return static_cast<int32_t>((static_cast<int64_t>(op) * max_parallelism + parallelism - 1) /
                              parallelism);
}
inline int32_t RangeEndForOperator(int32_t op, int32_t parallelism, int32_t max_parallelism) {
  return static_cast<int32_t>(((static_cast<int64_t>(op) + 1) * max_parallelism - 1) / parallelism);
}
inline int32_t OperatorForKeyGroup(int32_t kg, int32_t parallelism, int32_t max_parallelism) {
  return static_cast<int32_t>(static_cast<int64_t>(kg) * parallelism / max_parallelism);
}

// 1 byte of key-group prefix while max parallelism fits in 128 groups, else 2 (big-endian).
inline int KeyGroupPrefixBytes(int32_t max_parallelism) { return max_parallelism > 128 ? 2 : 1; }

inline void WriteKeyGroupPrefix(int32_t kg, int prefix_bytes, char* out) {
  if (prefix_bytes == 1) {
    out[0] = static_cast<char>(kg & 0xFF);
  } else {
    out[0] = static_cast<char>((kg >> 8) & 0xFF);
    out[1] = static_cast<char>(kg & 0xFF);
  }
}

// The key-group prefix alone: the lower bound of key group kg's keys (and the exclusive upper
// bound of kg - 1's), for range scans and range deletes.
inline std::string KeyGroupBound(int32_t kg, int prefix_bytes) {
  std::string s(prefix_bytes, '\0');
  WriteKeyGroupPrefix(kg, prefix_bytes, &s[0]);
  return s;
}

inline int32_t ReadKeyGroupPrefix(const char* in, int prefix_bytes) {
  const auto* u = reinterpret_cast<const unsigned char*>(in);
  return prefix_bytes == 1 ? u[0] : ((u[0] << 8) | u[1]);
}

}  // namespace stateengine
