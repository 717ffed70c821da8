// Snappy framing format (github.com/google/snappy/blob/main/framing_format.txt): a stream
// identifier chunk, then chunks of at most 64 KiB of input, each with the masked CRC-32C of its
// uncompressed bytes. Each key group of a full snapshot is one such stream, so python-snappy's
// framing decoder (and Xerial's) can read any key group on its own.
// Invariant: FramedReader yields exactly the bytes FramedWriter was given, or a Corruption
// status naming the file; it never returns unchecked bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "file_io.h"

namespace stateengine {

class FramedWriter {
 public:
  // The state of bytes that belong to several states, or to none in particular.
  static constexpr int kMixed = -1;

  explicit FramedWriter(FileWriter* out) : out_(out) {}
  // Starts a new stream (writes the stream identifier chunk).
  rocksdb::Status Begin();
  // data belongs to one state (a snapshot's state id) or is kMixed. A chunk holds one
  // state's bytes where they come in runs of some size, and chunks of a state that did not
  // compress are stored without trying again for a while (1, 2, 4 ... 64 chunks): snappy
  // spends as long on bytes it cannot shrink as on bytes it can, and the framing format lets
  // any chunk be stored uncompressed.
  rocksdb::Status Append(const char* data, size_t n, int state = kMixed);
  // Ends the stream: emits the buffered partial chunk.
  rocksdb::Status Finish();

 private:
  struct Backoff {
    uint32_t skip = 0;   // chunks left to store without trying
    uint32_t next = 0;   // how many to skip after the next failed try
  };
  rocksdb::Status EmitChunk(const char* data, size_t n, int state);
  rocksdb::Status EmitPending();
  bool ShouldTry(int state);
  void Learn(int state, bool compressed);
  FileWriter* out_;
  std::string pending_;
  int pending_state_ = kMixed;
  std::string compressed_;
  std::string header_;
  std::vector<Backoff> backoff_;  // by state id; kept across the streams of one file
};

// A key-group section arriving in chunks. Parsers look straight into the current chunk when
// what they need lies inside it (no copy) and fall back to Read across chunk boundaries.
// Lengths come from the file, so nothing is allocated for them up front: a reader holds at
// most one chunk (64 KiB, or the compressed chunk's bytes) and Append grows its output only
// as bytes actually arrive.
class ChunkedReader {
 public:
  virtual ~ChunkedReader() = default;
  // Positions at the start of a section.
  virtual rocksdb::Status Begin(uint64_t offset) = 0;
  // Copies exactly n bytes, crossing chunks as needed.
  rocksdb::Status Read(char* out, size_t n);
  // Appends exactly n bytes to out, chunk by chunk.
  rocksdb::Status Append(std::string* out, size_t n);
  // An upper bound of the bytes the rest of the file can still yield.
  virtual uint64_t MaxRemaining() const = 0;
  // Whether everything read so far ends exactly at byte `end` of the file: no unread bytes
  // left in the current chunk and the next chunk (or the end of the file) begins there.
  virtual bool EndsAt(uint64_t end) const = 0;
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
  uint64_t MaxRemaining() const override;
  bool EndsAt(uint64_t end) const override {
    return available() == 0 && in_->position() == end;
  }

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
  uint64_t MaxRemaining() const override { return available() + in_->remaining(); }
  bool EndsAt(uint64_t end) const override { return in_->position() - available() == end; }

 protected:
  rocksdb::Status NextChunk() override;

 private:
  FileReader* in_;
};

}  // namespace stateengine
