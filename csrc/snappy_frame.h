// Snappy framing format (github.com/google/snappy/blob/main/framing_format.txt): a stream
// identifier chunk, then chunks of at most 64 KiB of input, each with the masked CRC-32C of its
// uncompressed bytes. Each key group of a full snapshot is one such stream, so python-snappy's
// framing decoder (and Xerial's) can read any key group on its own.
// Invariant: FramedReader yields exactly the bytes FramedWriter was given, or a Corruption
// status naming the file; it never returns unchecked bytes.
#pragma once

#include <cstdint>
#include <string>

#include "file_io.h"

namespace stateengine {

class FramedWriter {
 public:
  explicit FramedWriter(FileWriter* out) : out_(out) {}
  // Starts a new stream (writes the stream identifier chunk).
  rocksdb::Status Begin();
  rocksdb::Status Append(const char* data, size_t n);
  // Ends the stream: emits the buffered partial chunk.
  rocksdb::Status Finish();

 private:
  rocksdb::Status EmitChunk(const char* data, size_t n);
  FileWriter* out_;
  std::string pending_;
  std::string compressed_;
  std::string header_;
};

// A key-group section arriving in chunks. Parsers look straight into the current chunk when
// what they need lies inside it (no copy) and fall back to Read across chunk boundaries.
class ChunkedReader {
 public:
  virtual ~ChunkedReader() = default;
  // Positions at the start of a section.
  virtual rocksdb::Status Begin(uint64_t offset) = 0;
  // Copies exactly n bytes, crossing chunks as needed.
  rocksdb::Status Read(char* out, size_t n);
  // The unread bytes of the current chunk; writable, so parsers may fix flags in place.
  char* view() { return &data_[0] + pos_; }
  size_t available() const { return data_.size() - pos_; }
  void Skip(size_t n) { pos_ += n; }

 protected:
  virtual rocksdb::Status NextChunk() = 0;
  std::string data_;
  size_t pos_ = 0;
};

// Snappy framed sections: each chunk is one decompressed, CRC-checked block.
class FramedReader : public ChunkedReader {
 public:
  explicit FramedReader(FileReader* in) : in_(in) {}
  rocksdb::Status Begin(uint64_t offset) override;

 protected:
  rocksdb::Status NextChunk() override;

 private:
  FileReader* in_;
  std::string raw_;
};

// Uncompressed sections (snapshots written with compress=False), read in 64 KiB pieces.
class RawReader : public ChunkedReader {
 public:
  explicit RawReader(FileReader* in) : in_(in) {}
  rocksdb::Status Begin(uint64_t offset) override;

 protected:
  rocksdb::Status NextChunk() override;

 private:
  FileReader* in_;
};

}  // namespace stateengine
