#include "snapshot_writer.h"

#include <memory>

#include "file_io.h"
#include "keygroups.h"
#include "merge_iterator.h"
#include "snappy_frame.h"

namespace stateengine {
namespace {

// Sink for one key group: snappy framed or raw, so the writer loop has one shape.
class GroupSink {
 public:
  GroupSink(FileWriter* out, bool compress) : out_(out), framed_(out), compress_(compress) {}
  rocksdb::Status Begin() { return compress_ ? framed_.Begin() : rocksdb::Status::OK(); }
  rocksdb::Status Append(const char* p, size_t n) {
    return compress_ ? framed_.Append(p, n) : out_->Append(p, n);
  }
  rocksdb::Status Finish() { return compress_ ? framed_.Finish() : rocksdb::Status::OK(); }

 private:
  FileWriter* out_;
  FramedWriter framed_;
  bool compress_;
};

void PutU16(std::string* s, uint16_t v) {
  s->push_back(static_cast<char>(v >> 8));
  s->push_back(static_cast<char>(v & 0xFF));
}

void PutI32(std::string* s, uint32_t v) {
  s->push_back(static_cast<char>(v >> 24));
  s->push_back(static_cast<char>(v >> 16));
  s->push_back(static_cast<char>(v >> 8));
  s->push_back(static_cast<char>(v));
}

}  // namespace

FullSnapshotWriter::FullSnapshotWriter(StateDB* db, std::vector<SnapshotColumn> columns,
                                       int prefix_bytes, int32_t kg_start, int32_t kg_end,
                                       bool compress)
    : db_(db),
      snapshot_(db->raw()->GetSnapshot()),
      columns_(std::move(columns)),
      prefix_bytes_(prefix_bytes),
      kg_start_(kg_start),
      kg_end_(kg_end),
      compress_(compress) {}

FullSnapshotWriter::~FullSnapshotWriter() { Release(); }

void FullSnapshotWriter::Release() {
  if (snapshot_ != nullptr) {
    db_->raw()->ReleaseSnapshot(snapshot_);
    snapshot_ = nullptr;
  }
}

rocksdb::Status FullSnapshotWriter::Write(const std::string& path, const std::string& meta_block,
                                          std::vector<KeyGroupOffset>* offsets,
                                          SnapshotStats* stats) {
  if (snapshot_ == nullptr) return rocksdb::Status::InvalidArgument("snapshot already released");
  const std::string lower = KeyGroupBound(kg_start_, prefix_bytes_);
  const std::string upper = KeyGroupBound(kg_end_ + 1, prefix_bytes_);
  rocksdb::Slice upper_slice(upper);
  std::vector<MergeIterator::Input> inputs;
  for (const auto& col : columns_) {
    rocksdb::ReadOptions ro;
    ro.snapshot = snapshot_;
    ro.fill_cache = false;  // a full pass must not evict the working set
    ro.readahead_size = 2 << 20;
    ro.iterate_upper_bound = (kg_end_ + 1 < (1 << (8 * prefix_bytes_))) ? &upper_slice : nullptr;
    std::unique_ptr<rocksdb::Iterator> it(db_->raw()->NewIterator(ro, db_->handle(col.cf_index)));
    it->Seek(lower);
    inputs.push_back({std::move(it), col.state_id});
  }
  MergeIterator merged(std::move(inputs), prefix_bytes_);

  FileWriter out;
  rocksdb::Status st = out.Open(path);
  if (!st.ok()) return st;
  st = out.Append(meta_block.data(), meta_block.size());
  if (!st.ok()) return st;

  GroupSink sink(&out, compress_);
  std::string buf, prev_key, prev_value;
  buf.reserve(1 << 16);
  bool have_prev = false;
  uint64_t n = 0;
  auto flush_buf = [&]() { return sink.Append(buf.data(), buf.size()); };

  while (merged.Valid()) {
    if ((++n & 4095) == 0 && cancelled_.load(std::memory_order_relaxed)) {
      return rocksdb::Status::Incomplete("snapshot cancelled");
    }
    const bool new_group = merged.is_new_key_group();
    const bool new_state = merged.is_new_state();
    if (have_prev) {
      if (new_group || new_state) prev_key[0] = static_cast<char>(prev_key[0] | kMetaFollowsFlag);
      PutI32(&buf, static_cast<uint32_t>(prev_key.size()));
      buf.append(prev_key);
      PutI32(&buf, static_cast<uint32_t>(prev_value.size()));
      buf.append(prev_value);
      if (new_group) PutU16(&buf, kEndOfKeyGroupMark);
      else if (new_state) PutU16(&buf, static_cast<uint16_t>(merged.state_id()));
    }
    if (new_group) {
      if (have_prev) {
        if (!(st = flush_buf()).ok() || !(st = sink.Finish()).ok()) return st;
        buf.clear();
      }
      offsets->push_back({merged.key_group(), out.offset()});
      if (!(st = sink.Begin()).ok()) return st;
      PutU16(&buf, static_cast<uint16_t>(merged.state_id()));
    }
    const rocksdb::Slice k = merged.key(), v = merged.value();
    prev_key.assign(k.data(), k.size());
    prev_value.assign(v.data(), v.size());
    have_prev = true;
    stats->entries++;
    stats->raw_bytes += k.size() + v.size();
    if (buf.size() >= (1 << 16)) {
      if (!(st = flush_buf()).ok()) return st;
      buf.clear();
    }
    merged.Next();
  }
  if (!merged.status().ok()) return merged.status();
  if (have_prev) {
    prev_key[0] = static_cast<char>(prev_key[0] | kMetaFollowsFlag);
    PutI32(&buf, static_cast<uint32_t>(prev_key.size()));
    buf.append(prev_key);
    PutI32(&buf, static_cast<uint32_t>(prev_value.size()));
    buf.append(prev_value);
    PutU16(&buf, kEndOfKeyGroupMark);
    if (!(st = flush_buf()).ok() || !(st = sink.Finish()).ok()) return st;
  }
  stats->file_bytes = out.offset();
  return out.Close();
}

rocksdb::Status IterateForBaseline(StateDB* db, const std::vector<int>& cf_indexes,
                                   int prefix_bytes, int32_t kg_start, int32_t kg_end,
                                   SnapshotStats* stats) {
  const std::string lower = KeyGroupBound(kg_start, prefix_bytes);
  const std::string upper = KeyGroupBound(kg_end + 1, prefix_bytes);
  rocksdb::Slice upper_slice(upper);
  for (int cf : cf_indexes) {
    rocksdb::ReadOptions ro;
    ro.fill_cache = false;
    ro.readahead_size = 2 << 20;
    ro.iterate_upper_bound = (kg_end + 1 < (1 << (8 * prefix_bytes))) ? &upper_slice : nullptr;
    std::unique_ptr<rocksdb::Iterator> it(db->raw()->NewIterator(ro, db->handle(cf)));
    for (it->Seek(lower); it->Valid(); it->Next()) {
      stats->entries++;
      stats->raw_bytes += it->key().size() + it->value().size();
    }
    if (!it->status().ok()) return it->status();
  }
  return rocksdb::Status::OK();
}

}  // namespace stateengine
