#include "snapshot_reader.h"

#include <rocksdb/write_batch.h>

#include "keygroups.h"
#include "snappy_frame.h"
#include "snapshot_writer.h"

namespace stateengine {
namespace {

constexpr uint32_t kMaxEntryBytes = 1u << 30;

// Reads a key-group section either through the snappy framing or raw.
class GroupSource {
 public:
  GroupSource(FileReader* in, bool compressed) : in_(in), framed_(in), compressed_(compressed) {}
  rocksdb::Status Begin(uint64_t offset) {
    return compressed_ ? framed_.Begin(offset) : in_->Seek(offset);
  }
  rocksdb::Status Read(char* out, size_t n, const char* what) {
    return compressed_ ? framed_.Read(out, n, what) : in_->ReadExact(out, n, what);
  }
  rocksdb::Status ReadU16(uint16_t* v, const char* what) {
    unsigned char b[2];
    rocksdb::Status st = Read(reinterpret_cast<char*>(b), 2, what);
    *v = static_cast<uint16_t>((b[0] << 8) | b[1]);
    return st;
  }
  rocksdb::Status ReadBlob(std::string* out, const char* what) {
    unsigned char b[4];
    rocksdb::Status st = Read(reinterpret_cast<char*>(b), 4, what);
    if (!st.ok()) return st;
    const uint32_t n = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    if (n > kMaxEntryBytes) {
      return rocksdb::Status::Corruption(in_->path(), std::string("implausible length of ") + what);
    }
    out->resize(n);
    return n == 0 ? st : Read(&(*out)[0], n, what);
  }

 private:
  FileReader* in_;
  FramedReader framed_;
  bool compressed_;
};

}  // namespace

rocksdb::Status FullSnapshotReader::Open(const std::string& path) { return in_.Open(path); }

rocksdb::Status FullSnapshotReader::RestoreKeyGroup(int32_t kg, uint64_t offset, bool compressed,
                                                    int prefix_bytes,
                                                    const std::vector<int>& cf_for_state,
                                                    StateDB* db, RestoreStats* stats) {
  auto corrupt = [&](const std::string& why) {
    return rocksdb::Status::Corruption(in_.path(), "key group " + std::to_string(kg) + ": " + why);
  };
  GroupSource src(&in_, compressed);
  rocksdb::Status st = src.Begin(offset);
  if (!st.ok()) return st;
  uint16_t state_id;
  if (!(st = src.ReadU16(&state_id, "a state id")).ok()) return st;
  rocksdb::WriteBatch batch;
  uint64_t entries = 0, bytes = 0;
  while (state_id != kEndOfKeyGroupMark) {
    if (state_id >= cf_for_state.size()) return corrupt("unknown state id " + std::to_string(state_id));
    const int cf = cf_for_state[state_id];
    for (;;) {
      if (!(st = src.ReadBlob(&key_, "a key")).ok()) return st;
      if (!(st = src.ReadBlob(&value_, "a value")).ok()) return st;
      if (key_.size() < static_cast<size_t>(prefix_bytes)) return corrupt("key shorter than its prefix");
      const bool last = (static_cast<unsigned char>(key_[0]) & kMetaFollowsFlag) != 0;
      key_[0] = static_cast<char>(key_[0] & ~kMetaFollowsFlag);
      if (ReadKeyGroupPrefix(key_.data(), prefix_bytes) != kg) {
        return corrupt("entry of key group " +
                       std::to_string(ReadKeyGroupPrefix(key_.data(), prefix_bytes)) +
                       " inside the section");
      }
      if (cf >= 0) {
        if (!(st = batch.Put(db->handle(cf), key_, value_)).ok()) return st;
      }
      ++entries;
      bytes += key_.size() + value_.size();
      if (last) break;
    }
    if (!(st = src.ReadU16(&state_id, "a state id or end mark")).ok()) return st;
  }
  // Only a fully decoded section reaches the database.
  if (batch.Count() > 0 && !(st = db->Write(&batch)).ok()) return st;
  stats->entries += entries;
  stats->raw_bytes += bytes;
  stats->key_groups++;
  return rocksdb::Status::OK();
}

}  // namespace stateengine
