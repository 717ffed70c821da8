// CRC-32C (Castagnoli), the checksum of the snappy framing format and of checkpoint files.
// Invariant: Crc32c(Crc32c(0, a), b) == Crc32c(0, a + b); hardware and table paths agree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace stateengine {

uint32_t Crc32c(uint32_t crc, const char* data, size_t n);

// The snappy framing format stores checksums masked so that CRCs of CRCs stay well mixed.
inline uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

// CRC-32C and size of a whole file; false (with errno text in *error) if it cannot be read.
bool FileCrc32c(const std::string& path, uint32_t* crc, uint64_t* size, std::string* error);

}  // namespace stateengine
