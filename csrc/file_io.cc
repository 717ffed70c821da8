#include "file_io.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include "crc32c.h"

namespace stateengine {
namespace {
constexpr size_t kBufferSize = 1 << 20;
constexpr uint64_t kSyncBytes = 8 << 20;
}

FileWriter::~FileWriter() {
  StopSyncer();
  if (f_ != nullptr) std::fclose(f_);
}

rocksdb::Status FileWriter::Error(const char* what) const {
  return rocksdb::Status::IOError(std::string(what) + " " + path_, std::strerror(errno));
}

rocksdb::Status FileWriter::Open(const std::string& path, bool durable) {
  path_ = path;
  durable_ = durable;
  f_ = std::fopen(path.c_str(), "wb");
  if (f_ == nullptr) return Error("cannot create");
  std::setvbuf(f_, nullptr, _IOFBF, kBufferSize);
  offset_ = 0;
  sync_requested_at_ = 0;
  crc_ = 0;
  stop_ = false;
  sync_errno_ = 0;
  return rocksdb::Status::OK();
}

rocksdb::Status FileWriter::Append(const char* data, size_t n) {
  if (n != 0 && std::fwrite(data, 1, n, f_) != n) return Error("cannot write");
  crc_ = Crc32c(crc_, data, n);
  offset_ += n;
  if (durable_ && offset_ - sync_requested_at_ >= kSyncBytes) {
    if (std::fflush(f_) != 0) return Error("cannot write");
    RequestSync();
  }
  return rocksdb::Status::OK();
}

void FileWriter::RequestSync() {
  sync_requested_at_ = offset_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sync_pending_ = true;  // a sync still running covers less; one more follows it
  }
  if (!syncer_.joinable()) {
    syncer_ = std::thread([this] { SyncLoop(); });
  } else {
    cv_.notify_one();
  }
}

void FileWriter::SyncLoop() {
  const int fd = fileno(f_);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return sync_pending_ || stop_; });
    if (stop_) return;
    sync_pending_ = false;
    lock.unlock();
    const int rc = ::fdatasync(fd);  // what write() handed to the kernel before this call
    const int err = rc == 0 ? 0 : errno;
    lock.lock();
    if (err != 0 && sync_errno_ == 0) sync_errno_ = err;
  }
}

void FileWriter::StopSyncer() {
  if (!syncer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  syncer_.join();
}

rocksdb::Status FileWriter::Close() {
  if (f_ == nullptr) return rocksdb::Status::OK();
  rocksdb::Status st;
  if (std::fflush(f_) != 0) st = Error("cannot write");
  StopSyncer();
  if (st.ok() && sync_errno_ != 0) {
    errno = sync_errno_;
    st = Error("cannot sync");
  }
  if (st.ok() && durable_ && ::fsync(fileno(f_)) != 0) st = Error("cannot flush");
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
  const long end = std::ftell(f_);
  if (end < 0) return rocksdb::Status::IOError("cannot seek " + path, std::strerror(errno));
  size_ = static_cast<uint64_t>(end);
  position_ = 0;
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
  position_ = offset;
  return rocksdb::Status::OK();
}

rocksdb::Status FileReader::Read(char* out, size_t n, size_t* got) {
  *got = std::fread(out, 1, n, f_);
  position_ += *got;
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
