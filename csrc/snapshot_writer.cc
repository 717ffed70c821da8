#include "snapshot_writer.h"

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

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

// Second stage of the writer: framing, compression, CRCs and file writes run on their own
// thread, in order, so iterating RocksDB never waits for snappy. The file offset of each key
// group is known only here, so the offsets are recorded here.
class BlockPipeline {
 public:
  enum class Kind { kBegin, kData, kEnd };
  struct Item {
    Kind kind;
    int32_t key_group;
    std::string data;
  };

  BlockPipeline(FileWriter* out, bool compress, std::vector<KeyGroupOffset>* offsets)
      : out_(out), sink_(out, compress), offsets_(offsets), thread_([this] { Run(); }) {}

  ~BlockPipeline() { Finish(); }

  // False once the consumer failed: the producer should stop and call Finish for the error.
  bool Push(Kind kind, int32_t key_group, std::string data) {
    std::unique_lock<std::mutex> lock(mu_);
    space_.wait(lock, [this] { return queue_.size() < kDepth || !status_.ok(); });
    if (!status_.ok()) return false;
    queue_.push_back({kind, key_group, std::move(data)});
    ready_.notify_one();
    return true;
  }

  rocksdb::Status Finish() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      ready_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
    return status_;
  }

 private:
  static constexpr size_t kDepth = 16;  // ~1 MiB in flight

  void Run() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [this] { return !queue_.empty() || done_; });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
        space_.notify_one();
      }
      rocksdb::Status st;
      switch (item.kind) {
        case Kind::kBegin:
          offsets_->push_back({item.key_group, out_->offset()});
          st = sink_.Begin();
          break;
        case Kind::kData:
          st = sink_.Append(item.data.data(), item.data.size());
          break;
        case Kind::kEnd:
          st = sink_.Finish();
          break;
      }
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        status_ = st;
        queue_.clear();
        space_.notify_all();
        return;
      }
    }
  }

  FileWriter* out_;
  GroupSink sink_;
  std::vector<KeyGroupOffset>* offsets_;
  std::mutex mu_;
  std::condition_variable ready_, space_;
  std::deque<Item> queue_;
  bool done_ = false;
  rocksdb::Status status_;
  std::thread thread_;
};

void PutU16(std::string* s, uint16_t v) {
  const char b[2] = {static_cast<char>(v >> 8), static_cast<char>(v & 0xFF)};
  s->append(b, 2);
}

void PutBlob(std::string* s, const rocksdb::Slice& x) {
  const auto n = static_cast<uint32_t>(x.size());
  const char b[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                     static_cast<char>(n >> 8), static_cast<char>(n)};
  s->append(b, 4);
  s->append(x.data(), x.size());
}

constexpr size_t kBlockBytes = 1 << 16;

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

  // Entries are encoded straight into buf; the "last pair of a run" bit is set afterwards at
  // key_pos (key[0] of the newest entry) once the next entry shows that a run ended, so no
  // entry is copied twice. A full buf is handed on without its newest entry, whose bit may
  // still change.
  BlockPipeline pipeline(&out, compress_, offsets);
  std::string buf;
  buf.reserve(kBlockBytes + 4096);
  size_t entry_pos = 0, key_pos = 0;
  bool have_entry = false;
  uint64_t n = 0;
  bool producing = true;
  auto end_group = [&]() {
    buf[key_pos] = static_cast<char>(buf[key_pos] | kMetaFollowsFlag);
    PutU16(&buf, kEndOfKeyGroupMark);
    producing = pipeline.Push(BlockPipeline::Kind::kData, 0, std::move(buf)) &&
                pipeline.Push(BlockPipeline::Kind::kEnd, 0, std::string());
    buf.clear();
  };

  while (producing && merged.Valid()) {
    if ((++n & 4095) == 0 && cancelled_.load(std::memory_order_relaxed)) {
      pipeline.Finish();
      return rocksdb::Status::Incomplete("snapshot cancelled");
    }
    if (merged.is_new_key_group()) {
      if (have_entry) end_group();
      if (!producing) break;
      producing = pipeline.Push(BlockPipeline::Kind::kBegin, merged.key_group(), std::string());
      buf.reserve(kBlockBytes + 4096);
      PutU16(&buf, static_cast<uint16_t>(merged.state_id()));
    } else if (merged.is_new_state()) {
      buf[key_pos] = static_cast<char>(buf[key_pos] | kMetaFollowsFlag);
      PutU16(&buf, static_cast<uint16_t>(merged.state_id()));
    }
    const rocksdb::Slice k = merged.key(), v = merged.value();
    entry_pos = buf.size();
    key_pos = entry_pos + 4;
    PutBlob(&buf, k);
    PutBlob(&buf, v);
    have_entry = true;
    stats->entries++;
    stats->raw_bytes += k.size() + v.size();
    if (buf.size() >= kBlockBytes && entry_pos > 0) {
      std::string tail(buf, entry_pos);
      buf.resize(entry_pos);
      producing = pipeline.Push(BlockPipeline::Kind::kData, 0, std::move(buf));
      buf = std::move(tail);
      buf.reserve(kBlockBytes + 4096);
      key_pos = 4;
      entry_pos = 0;
    }
    merged.Next();
  }
  if (producing && have_entry) end_group();
  st = pipeline.Finish();
  if (!st.ok()) return st;
  if (!merged.status().ok()) return merged.status();
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
