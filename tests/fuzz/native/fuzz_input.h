// Shared by the libFuzzer harnesses (tests/fuzz/native/*_fuzz.cc): reading structured choices
// off the front of an input, a memory file for code that reads paths, and the oracle's abort.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace fuzz {

// Consumes bytes from the front; past the end every read yields zeros.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  uint8_t Byte() { return n_ ? (--n_, *p_++) : 0; }
  uint32_t Below(uint32_t bound) { return bound ? Byte() % bound : 0; }
  bool Bit() { return Byte() & 1; }
  std::string Bytes(size_t max) {
    const size_t k = n_ < max ? n_ : max;
    std::string s(reinterpret_cast<const char*>(p_), k);
    p_ += k;
    n_ -= k;
    return s;
  }
  std::string Rest() { return Bytes(n_); }
  size_t left() const { return n_; }

 private:
  const uint8_t* p_;
  size_t n_;
};

// A path whose content is `bytes`: a memfd seen through /proc/self/fd, so no disk is touched.
class MemFile {
 public:
  MemFile() : fd_(memfd_create("fuzz", 0)) {
    if (fd_ < 0) std::abort();
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { close(fd_); }
  const std::string& Write(const std::string& bytes) {
    if (ftruncate(fd_, 0) != 0 || pwrite(fd_, bytes.data(), bytes.size(), 0) !=
                                       static_cast<ssize_t>(bytes.size())) {
      std::abort();
    }
    return path_;
  }
  const std::string& path() const { return path_; }
  std::string Read() const {
    std::string out(static_cast<size_t>(lseek(fd_, 0, SEEK_END)), '\0');
    if (pread(fd_, &out[0], out.size(), 0) != static_cast<ssize_t>(out.size())) std::abort();
    return out;
  }

 private:
  int fd_;
  std::string path_;
};

// The oracle failed: a finding, reported like a crash.
[[noreturn]] inline void Fail(const char* what) {
  std::fprintf(stderr, "ORACLE FAILED: %s\n", what);
  std::abort();
}

#define FUZZ_CHECK(cond) \
  do {                   \
    if (!(cond)) ::fuzz::Fail(#cond); \
  } while (0)

}  // namespace fuzz
