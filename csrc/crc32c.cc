#include "crc32c.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace stateengine {
namespace {

struct Table {
  uint32_t t[8][256];
  Table() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    }
  }
};

const Table& GetTable() {
  static const Table table;
  return table;
}

// Slicing-by-8: portable fallback for machines without the CRC32 instruction.
uint32_t Software(uint32_t crc, const unsigned char* p, size_t n) {
  const Table& tb = GetTable();
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    word ^= crc;
    crc = tb.t[7][word & 0xFF] ^ tb.t[6][(word >> 8) & 0xFF] ^ tb.t[5][(word >> 16) & 0xFF] ^
          tb.t[4][(word >> 24) & 0xFF] ^ tb.t[3][(word >> 32) & 0xFF] ^
          tb.t[2][(word >> 40) & 0xFF] ^ tb.t[1][(word >> 48) & 0xFF] ^ tb.t[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ tb.t[0][(crc ^ *p++) & 0xFF];
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t Hardware(uint32_t crc, const unsigned char* p,
                                                     size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}

bool HasHardware() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t Crc32c(uint32_t crc, const char* data, size_t n) {
  const auto* p = reinterpret_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (HasHardware()) return ~Hardware(crc, p, n);
#endif
  return ~Software(crc, p, n);
}

bool FileCrc32c(const std::string& path, uint32_t* crc, uint64_t* size, std::string* error) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) {
    *error = std::strerror(errno);
    return false;
  }
  std::unique_ptr<char[]> buf(new char[1 << 20]);
  uint32_t c = 0;
  uint64_t total = 0;
  size_t got;
  while ((got = std::fread(buf.get(), 1, 1 << 20, f.get())) > 0) {
    c = Crc32c(c, buf.get(), got);
    total += got;
  }
  if (std::ferror(f.get())) {
    *error = std::strerror(errno);
    return false;
  }
  *crc = c;
  *size = total;
  return true;
}

}  // namespace stateengine
