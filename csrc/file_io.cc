#include "file_io.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

namespace stateengine {
namespace {
constexpr size_t kBufferSize = 1 << 20;
constexpr uint64_t kWritebackBytes = 8 << 20;
}

FileWriter::~FileWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

rocksdb::Status FileWriter::Error(const char* what) const {
  return rocksdb::Status::IOError(std::string(what) + " " + path_, std::strerror(errno));
}

rocksdb::Status FileWriter::Open(const std::string& path) {
  path_ = path;
  f_ = std::fopen(path.c_str(), "wb");
  if (f_ == nullptr) return Error("cannot create");
  std::setvbuf(f_, nullptr, _IOFBF, kBufferSize);
  offset_ = 0;
  return rocksdb::Status::OK();
}

rocksdb::Status FileWriter::Append(const char* data, size_t n) {
  if (n != 0 && std::fwrite(data, 1, n, f_) != n) return Error("cannot write");
  offset_ += n;
  if (offset_ - writeback_from_ >= kWritebackBytes) StartWriteback();
  return rocksdb::Status::OK();
}

void FileWriter::StartWriteback() {
  // Asks the kernel to start writing what we have so far (it does not wait): the disk works
  // while we encode the rest, and Close()'s fsync only waits for the tail.
#if defined(__linux__)
  if (std::fflush(f_) == 0) {
    ::sync_file_range(fileno(f_), static_cast<off64_t>(writeback_from_),
                      static_cast<off64_t>(offset_ - writeback_from_), SYNC_FILE_RANGE_WRITE);
  }
#endif
  writeback_from_ = offset_;
}

rocksdb::Status FileWriter::Close() {
  if (f_ == nullptr) return rocksdb::Status::OK();
  rocksdb::Status st;
  if (std::fflush(f_) != 0 || ::fsync(fileno(f_)) != 0) st = Error("cannot flush");
  if (std::fclose(f_) != 0 && st.ok()) st = Error("cannot close");
  f_ = nullptr;
  return st;
}

FileReader::~FileReader() {
  if (f_ != nullptr) std::fclose(f_);
}

rocksdb::Status FileReader::Open(const std::string& path) {
  path_ = path;
  f_ = std::fopen(path.c_str(), "rb");
  if (f_ == nullptr) return rocksdb::Status::IOError("cannot open " + path, std::strerror(errno));
  std::setvbuf(f_, nullptr, _IOFBF, kBufferSize);
  if (std::fseek(f_, 0, SEEK_END) != 0) {
    return rocksdb::Status::IOError("cannot seek " + path, std::strerror(errno));
  }
  size_ = static_cast<uint64_t>(std::ftell(f_));
  std::fseek(f_, 0, SEEK_SET);
  return rocksdb::Status::OK();
}

rocksdb::Status FileReader::Seek(uint64_t offset) {
  if (offset > size_) {
    return rocksdb::Status::Corruption(path_, "offset " + std::to_string(offset) +
                                                  " lies beyond the end of the file (truncated?)");
  }
  if (std::fseek(f_, static_cast<long>(offset), SEEK_SET) != 0) {
    return rocksdb::Status::IOError("cannot seek " + path_, std::strerror(errno));
  }
  return rocksdb::Status::OK();
}

rocksdb::Status FileReader::Read(char* out, size_t n, size_t* got) {
  *got = std::fread(out, 1, n, f_);
  if (*got < n && std::ferror(f_)) {
    return rocksdb::Status::IOError("cannot read " + path_, std::strerror(errno));
  }
  return rocksdb::Status::OK();
}

rocksdb::Status FileReader::ReadExact(char* out, size_t n, const char* what) {
  size_t got = 0;
  rocksdb::Status st = Read(out, n, &got);
  if (!st.ok()) return st;
  if (got != n) {
    return rocksdb::Status::Corruption(path_, std::string("file ends inside ") + what +
                                                  " (truncated)");
  }
  return rocksdb::Status::OK();
}

}  // namespace stateengine
