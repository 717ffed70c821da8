#include "keygroups.h"

#include <cmath>
#include <cstring>

namespace stateengine {
namespace {

constexpr uint32_t kC1 = 0xcc9e2d51u;
constexpr uint32_t kC2 = 0x1b873593u;

inline uint32_t Rotl(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

inline uint32_t MixK1(uint32_t k1) {
  k1 *= kC1;
  k1 = Rotl(k1, 15);
  return k1 * kC2;
}

inline uint32_t MixH1(uint32_t h1, uint32_t k1) {
  h1 ^= k1;
  h1 = Rotl(h1, 13);
  return h1 * 5 + 0xe6546b64u;
}

inline uint32_t Fmix(uint32_t h1, uint32_t length) {
  h1 ^= length;
  h1 ^= h1 >> 16;
  h1 *= 0x85ebca6bu;
  h1 ^= h1 >> 13;
  h1 *= 0xc2b2ae35u;
  h1 ^= h1 >> 16;
  return h1;
}

}  // namespace

int32_t SparkHashInt(int32_t value, int32_t seed) {
  uint32_t h1 = MixH1(static_cast<uint32_t>(seed), MixK1(static_cast<uint32_t>(value)));
  return static_cast<int32_t>(Fmix(h1, 4));
}

int32_t SparkHashLong(int64_t value, int32_t seed) {
  const auto bits = static_cast<uint64_t>(value);
  uint32_t h1 = MixH1(static_cast<uint32_t>(seed), MixK1(static_cast<uint32_t>(bits)));
  h1 = MixH1(h1, MixK1(static_cast<uint32_t>(bits >> 32)));
  return static_cast<int32_t>(Fmix(h1, 8));
}

int32_t SparkHashBytes(const char* data, size_t len, int32_t seed) {
  const size_t aligned = len - len % 4;
  uint32_t h1 = static_cast<uint32_t>(seed);
  for (size_t i = 0; i < aligned; i += 4) {
    uint32_t word;
    std::memcpy(&word, data + i, 4);  // Spark reads words little-endian; so do x86 and ARM.
    h1 = MixH1(h1, MixK1(word));
  }
  for (size_t i = aligned; i < len; ++i) {
    const auto b = static_cast<int32_t>(static_cast<signed char>(data[i]));
    h1 = MixH1(h1, MixK1(static_cast<uint32_t>(b)));
  }
  return static_cast<int32_t>(Fmix(h1, static_cast<uint32_t>(len)));
}

int32_t SparkHashDouble(double value, int32_t seed) {
  if (value == 0.0) return SparkHashLong(0, seed);
  if (std::isnan(value)) return SparkHashLong(0x7ff8000000000000LL, seed);
  int64_t bits;
  std::memcpy(&bits, &value, 8);
  return SparkHashLong(bits, seed);
}

int32_t SparkHashFloat(float value, int32_t seed) {
  if (value == 0.0f) return SparkHashInt(0, seed);
  if (std::isnan(value)) return SparkHashInt(0x7fc00000, seed);
  int32_t bits;
  std::memcpy(&bits, &value, 4);
  return SparkHashInt(bits, seed);
}

}  // namespace stateengine
