// Buffered local file I/O for snapshot streams. Errors come back as rocksdb::Status naming the
// file, so a failed snapshot or restore always says which file was at fault.
// Invariant: FileWriter::offset() is the number of bytes handed to Append so far, i.e. the
// position the next byte will have in the finished file; Close() returns OK only once every
// byte is on stable storage (fsync). Writeback starts early, so that fsync finds little to do.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include <rocksdb/status.h>

namespace stateengine {

class FileWriter {
 public:
  FileWriter() = default;
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  rocksdb::Status Open(const std::string& path);
  rocksdb::Status Append(const char* data, size_t n);
  uint64_t offset() const { return offset_; }
  // Flushes, fsyncs and closes; the file is complete only if this returns OK.
  rocksdb::Status Close();

 private:
  rocksdb::Status Error(const char* what) const;
  void StartWriteback();
  FILE* f_ = nullptr;
  std::string path_;
  uint64_t offset_ = 0;
  uint64_t writeback_from_ = 0;
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
  const std::string& path() const { return path_; }

 private:
  FILE* f_ = nullptr;
  std::string path_;
  uint64_t size_ = 0;
};

}  // namespace stateengine
