#include "snappy_frame.h"

#include <algorithm>
#include <cstring>

#include <snappy.h>

#include "crc32c.h"

namespace stateengine {
namespace {

constexpr size_t kMaxBlock = 65536;
// A state's bytes close a chunk of their own when at least this many are pending.
constexpr size_t kMinStateChunk = 8 << 10;
// Longest run of chunks of one state stored without a compression attempt.
constexpr uint32_t kMaxSkippedChunks = 64;
constexpr unsigned char kCompressedChunk = 0x00;
constexpr unsigned char kUncompressedChunk = 0x01;
constexpr unsigned char kPaddingChunk = 0xfe;
constexpr unsigned char kStreamIdentifier = 0xff;
constexpr char kStreamHeader[] = {'\xff', '\x06', '\x00', '\x00', 's', 'N', 'a', 'P', 'p', 'Y'};

void PutLE24(std::string* out, uint32_t v) {
  out->push_back(static_cast<char>(v & 0xFF));
  out->push_back(static_cast<char>((v >> 8) & 0xFF));
  out->push_back(static_cast<char>((v >> 16) & 0xFF));
}

void PutLE32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

uint32_t GetLE32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return u[0] | (u[1] << 8) | (u[2] << 16) | (static_cast<uint32_t>(u[3]) << 24);
}

}  // namespace

rocksdb::Status FramedWriter::Begin() {
  pending_.clear();
  return out_->Append(kStreamHeader, sizeof(kStreamHeader));
}

rocksdb::Status FramedWriter::Append(const char* data, size_t n, int state) {
  if (!pending_.empty() && state != pending_state_) {
    // Another state's bytes: close a chunk of some size, else let the chunk be mixed.
    if (pending_.size() >= kMinStateChunk) {
      rocksdb::Status st = EmitPending();
      if (!st.ok()) return st;
    } else {
      pending_state_ = kMixed;
    }
  }
  while (n > 0) {
    if (pending_.empty() && n >= kMaxBlock) {  // whole blocks skip the staging copy
      rocksdb::Status st = EmitChunk(data, kMaxBlock, state);
      if (!st.ok()) return st;
      data += kMaxBlock;
      n -= kMaxBlock;
      continue;
    }
    if (pending_.empty()) pending_state_ = state;
    const size_t take = std::min(n, kMaxBlock - pending_.size());
    pending_.append(data, take);
    data += take;
    n -= take;
    if (pending_.size() == kMaxBlock) {
      rocksdb::Status st = EmitPending();
      if (!st.ok()) return st;
    }
  }
  return rocksdb::Status::OK();
}

rocksdb::Status FramedWriter::Finish() {
  return pending_.empty() ? rocksdb::Status::OK() : EmitPending();
}

rocksdb::Status FramedWriter::EmitPending() {
  rocksdb::Status st = EmitChunk(pending_.data(), pending_.size(), pending_state_);
  pending_.clear();
  return st;
}

bool FramedWriter::ShouldTry(int state) {
  if (state < 0) return true;
  if (static_cast<size_t>(state) >= backoff_.size()) backoff_.resize(state + 1);
  Backoff& b = backoff_[state];
  if (b.skip == 0) return true;
  --b.skip;
  return false;
}

void FramedWriter::Learn(int state, bool compressed) {
  if (state < 0) return;
  Backoff& b = backoff_[state];
  if (compressed) {
    b.next = 0;
  } else {
    b.next = b.next == 0 ? 1 : std::min<uint32_t>(b.next * 2, kMaxSkippedChunks);
    b.skip = b.next;
  }
}

rocksdb::Status FramedWriter::EmitChunk(const char* data, size_t n, int state) {
  const uint32_t crc = MaskCrc(Crc32c(0, data, n));
  bool compress = false;
  size_t clen = 0;
  if (ShouldTry(state)) {
    compressed_.resize(snappy::MaxCompressedLength(n));
    snappy::RawCompress(data, n, &compressed_[0], &clen);
    // Keep the compressed form only when it saves at least 1/8, as reference encoders do.
    compress = clen < n - n / 8;
    Learn(state, compress);
  }
  const char* body = compress ? compressed_.data() : data;
  const size_t blen = compress ? clen : n;
  header_.clear();
  header_.push_back(static_cast<char>(compress ? kCompressedChunk : kUncompressedChunk));
  PutLE24(&header_, static_cast<uint32_t>(blen + 4));
  PutLE32(&header_, crc);
  rocksdb::Status st = out_->Append(header_.data(), header_.size());
  if (!st.ok()) return st;
  return out_->Append(body, blen);
}

rocksdb::Status FramedReader::Begin(uint64_t offset) {
  data_.clear();
  pos_ = 0;
  rocksdb::Status st = in_->Seek(offset);
  if (!st.ok()) return st;
  char header[sizeof(kStreamHeader)];
  st = in_->ReadExact(header, sizeof(header), "a snappy stream header");
  if (!st.ok()) return st;
  if (std::string(header, sizeof(header)) != std::string(kStreamHeader, sizeof(kStreamHeader))) {
    return rocksdb::Status::Corruption(in_->path(), "no snappy stream identifier at offset " +
                                                        std::to_string(offset));
  }
  return rocksdb::Status::OK();
}

uint64_t FramedReader::MaxRemaining() const {
  // A chunk yields at most 64 KiB from at least 8 bytes of header and CRC plus the snappy
  // bytes, and snappy expands at most ~21x (a 3-byte copy of 64 bytes): 32x bounds both.
  return available() + in_->remaining() * 32;
}

rocksdb::Status FramedReader::NextChunk() {
  for (;;) {
    char head[4];
    rocksdb::Status st = in_->ReadExact(head, 4, "a snappy chunk header");
    if (!st.ok()) return st;
    const auto type = static_cast<unsigned char>(head[0]);
    const uint32_t len = static_cast<unsigned char>(head[1]) |
                         (static_cast<unsigned char>(head[2]) << 8) |
                         (static_cast<uint32_t>(static_cast<unsigned char>(head[3])) << 16);
    if (len > in_->remaining()) {
      return rocksdb::Status::Corruption(
          in_->path(), "snappy chunk of " + std::to_string(len) + " bytes but only " +
                           std::to_string(in_->remaining()) + " left in the file (truncated?)");
    }
    if (type >= 0x80) {
      // Skippable (a concatenated stream may repeat its identifier): seek past, no buffer.
      if (!(st = in_->Seek(in_->size() - in_->remaining() + len)).ok()) return st;
      continue;
    }
    if (len < 4 || (type != kCompressedChunk && type != kUncompressedChunk)) {
      return rocksdb::Status::Corruption(in_->path(), "unknown snappy chunk type " +
                                                          std::to_string(type));
    }
    const size_t max_body = type == kCompressedChunk ? snappy::MaxCompressedLength(kMaxBlock)
                                                     : kMaxBlock;
    if (len - 4 > max_body) {
      return rocksdb::Status::Corruption(in_->path(), "snappy chunk larger than 64 KiB");
    }
    raw_.resize(len);
    st = in_->ReadExact(&raw_[0], len, "a snappy chunk");
    if (!st.ok()) return st;
    const uint32_t expected = GetLE32(raw_.data());
    if (type == kCompressedChunk) {
      size_t ulen = 0;
      if (!snappy::GetUncompressedLength(raw_.data() + 4, len - 4, &ulen) || ulen > kMaxBlock) {
        return rocksdb::Status::Corruption(in_->path(), "bad snappy chunk length");
      }
      data_.resize(ulen);
      if (!snappy::RawUncompress(raw_.data() + 4, len - 4, &data_[0])) {
        return rocksdb::Status::Corruption(in_->path(), "snappy chunk does not decompress");
      }
      pos_ = 0;
    } else {
      data_.swap(raw_);  // the payload stays where it was read, after the 4 CRC bytes
      pos_ = 4;
    }
    if (MaskCrc(Crc32c(0, data_.data() + pos_, data_.size() - pos_)) != expected) {
      return rocksdb::Status::Corruption(in_->path(), "snappy chunk checksum mismatch");
    }
    return rocksdb::Status::OK();
  }
}

rocksdb::Status ChunkedReader::Read(char* out, size_t n) {
  while (n > 0) {
    if (pos_ == data_.size()) {
      rocksdb::Status st = NextChunk();
      if (!st.ok()) return st;  // already names the file
      continue;
    }
    const size_t take = std::min(n, data_.size() - pos_);
    std::memcpy(out, data_.data() + pos_, take);
    pos_ += take;
    out += take;
    n -= take;
  }
  return rocksdb::Status::OK();
}

rocksdb::Status ChunkedReader::Append(std::string* out, size_t n) {
  // No reserve(n): n comes from the file. The string grows with the bytes that arrive.
  while (n > 0) {
    if (pos_ == data_.size()) {
      rocksdb::Status st = NextChunk();
      if (!st.ok()) return st;
      continue;
    }
    const size_t take = std::min(n, data_.size() - pos_);
    out->append(data_.data() + pos_, take);
    pos_ += take;
    n -= take;
  }
  return rocksdb::Status::OK();
}

rocksdb::Status RawReader::Begin(uint64_t offset) {
  data_.clear();
  pos_ = 0;
  return in_->Seek(offset);
}

rocksdb::Status RawReader::NextChunk() {
  data_.resize(kMaxBlock);
  size_t got = 0;
  rocksdb::Status st = in_->Read(&data_[0], kMaxBlock, &got);
  if (!st.ok()) return st;
  if (got == 0) {
    return rocksdb::Status::Corruption(in_->path(), "file ends inside a key group (truncated)");
  }
  data_.resize(got);
  pos_ = 0;
  return rocksdb::Status::OK();
}

}  // namespace stateengine
