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

class FramedReader {
 public:
  explicit FramedReader(FileReader* in) : in_(in) {}
  // Positions at a stream start (the reader must be at the stream identifier chunk).
  rocksdb::Status Begin(uint64_t offset);
  // Reads exactly n decompressed bytes.
  rocksdb::Status Read(char* out, size_t n, const char* what);

 private:
  rocksdb::Status NextChunk();
  FileReader* in_;
  std::string data_;  // decompressed bytes of the current chunk
  size_t pos_ = 0;
  std::string raw_;
};

}  // namespace stateengine
