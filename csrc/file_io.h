// Buffered local file I/O for snapshot streams. Errors come back as rocksdb::Status naming the
// file, so a failed snapshot or restore always says which file was at fault.
// Invariant: FileWriter::offset() is the number of bytes handed to Append so far, i.e. the
// position the next byte will have in the finished file, and crc() their CRC-32C; Close()
// returns OK only once every byte is on stable storage (fsync) when the file was opened
// durable. Syncs run in the background as the file grows, so that Close() finds little to do.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include <rocksdb/status.h>

namespace stateengine {

class FileWriter {
 public:
  FileWriter() = default;
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  // durable: Close() fsyncs. A file that is only staged for an upload elsewhere is not.
  rocksdb::Status Open(const std::string& path, bool durable = true);
  rocksdb::Status Append(const char* data, size_t n);
  uint64_t offset() const { return offset_; }
  // CRC-32C of every byte appended so far: the file's checksum without reading it back.
  uint32_t crc() const { return crc_; }
  // Flushes, fsyncs (if durable) and closes; the file is complete only if this returns OK.
  rocksdb::Status Close();

 private:
  rocksdb::Status Error(const char* what) const;
  void RequestSync();
  void SyncLoop();
  void StopSyncer();
  FILE* f_ = nullptr;
  std::string path_;
  bool durable_ = true;
  uint64_t offset_ = 0;
  uint64_t sync_requested_at_ = 0;
  uint32_t crc_ = 0;
  // Background fdatasync of what was written so far, every kSyncBytes: a sync's cost grows
  // with the bytes it has to flush (on virtual disks, a cache flush per megabyte), so syncing
  // as the file grows, while the writer goes on, leaves Close() only the tail.
  std::thread syncer_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool sync_pending_ = false;
  bool stop_ = false;
  int sync_errno_ = 0;
};

class FileReader {
 public:
  FileReader() = default;
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  rocksdb::Status Open(const std::string& path);
  rocksdb::Status Seek(uint64_t offset);
  // Reads up to n bytes; *got < n only at end of file.
  rocksdb::Status Read(char* out, size_t n, size_t* got);
  // Reads exactly n bytes or reports the file as truncated.
  rocksdb::Status ReadExact(char* out, size_t n, const char* what);
  uint64_t size() const { return size_; }
  // Bytes between the read position and the end of the file: no length read from the file
  // may make a reader allocate more than this.
  uint64_t remaining() const { return size_ - position_; }
  uint64_t position() const { return position_; }
  const std::string& path() const { return path_; }

 private:
  FILE* f_ = nullptr;
  std::string path_;
  uint64_t size_ = 0;
  uint64_t position_ = 0;
};

}  // namespace stateengine
