#include "snapshot_writer.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <thread>

#include "codec.h"
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
  rocksdb::Status Append(const char* p, size_t n, int state) {
    return compress_ ? framed_.Append(p, n, state) : out_->Append(p, n);
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
    int state;  // kData: the state all of data belongs to, or FramedWriter::kMixed
  };

  BlockPipeline(FileWriter* out, bool compress, std::vector<KeyGroupOffset>* offsets)
      : out_(out), sink_(out, compress), offsets_(offsets), thread_([this] { Run(); }) {}

  ~BlockPipeline() { Finish(); }

  // False once the consumer failed: the producer should stop and call Finish for the error.
  bool Push(Kind kind, int32_t key_group, std::string data = std::string(),
            int state = FramedWriter::kMixed) {
    std::unique_lock<std::mutex> lock(mu_);
    space_.wait(lock, [this] { return queue_.size() < kDepth || !status_.ok(); });
    if (!status_.ok()) return false;
    queue_.push_back({kind, key_group, std::move(data), state});
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
      try {
        switch (item.kind) {
          case Kind::kBegin:
            offsets_->push_back({item.key_group, out_->offset()});
            st = sink_.Begin();
            break;
          case Kind::kData:
            st = sink_.Append(item.data.data(), item.data.size(), item.state);
            break;
          case Kind::kEnd:
            st = sink_.Finish();
            break;
        }
      } catch (const std::bad_alloc&) {  // nothing may escape a thread: it would terminate
        st = rocksdb::Status::MemoryLimit("out of memory while compressing a snapshot");
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

constexpr size_t kBlockBytes = 1 << 16;
// A finished state run at least this long is handed over on its own (see block_state).
constexpr size_t kMinRunBlockBytes = 8 << 10;

// The block being encoded: bytes [0, used) are entries, the rest is room. Entries are written
// through a pointer into room sized ahead, not appended: appends re-check capacity and size
// for every field, and that was a quarter of the encoding thread's time.
class BlockBuffer {
 public:
  BlockBuffer() { Fresh(); }
  size_t used() const { return used_; }
  char& at(size_t pos) { return buf_[pos]; }
  char* Room(size_t n) {
    if (used_ + n > buf_.size()) buf_.resize(std::max(buf_.size() * 2, used_ + n));
    return &buf_[used_];
  }
  void PutU16(uint16_t v) {
    char* p = Room(2);
    p[0] = static_cast<char>(v >> 8);
    p[1] = static_cast<char>(v & 0xFF);
    used_ += 2;
  }
  // `i32 len | key | i32 len | value`; returns the entry's offset.
  size_t PutEntry(const rocksdb::Slice& k, const rocksdb::Slice& v) {
    const size_t at = used_;
    char* p = Room(8 + k.size() + v.size());
    StoreBE32(p, static_cast<uint32_t>(k.size()));
    std::memcpy(p + 4, k.data(), k.size());
    p += 4 + k.size();
    StoreBE32(p, static_cast<uint32_t>(v.size()));
    std::memcpy(p + 4, v.data(), v.size());
    used_ += 8 + k.size() + v.size();
    return at;
  }
  // Hands over bytes [0, keep_from) and starts a new block holding [keep_from, used).
  std::string Take(size_t keep_from) {
    const size_t tail = used_ - keep_from;
    std::string out = std::move(buf_);
    Fresh();
    std::memcpy(Room(tail), out.data() + keep_from, tail);
    used_ = tail;
    out.resize(keep_from);
    return out;
  }

 private:
  void Fresh() {
    buf_.clear();
    buf_.resize(kBlockBytes + 4096);
    used_ = 0;
  }
  std::string buf_;
  size_t used_ = 0;
};

}  // namespace

namespace {

uint64_t SuperVersionNumber(StateDB* db, int cf) {
  uint64_t n = 0;
  db->raw()->GetIntProperty(db->handle(cf), rocksdb::DB::Properties::kCurrentSuperVersionNumber,
                            &n);
  return n;
}

}  // namespace

rocksdb::Status NewConsistentIterators(StateDB* db, const rocksdb::ReadOptions& ro,
                                       const std::vector<int>& cf_indexes,
                                       std::vector<std::unique_ptr<rocksdb::Iterator>>* out) {
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  for (int cf : cf_indexes) handles.push_back(db->handle(cf));
  // NewIterators reads the latest sequence number, then references each family's current
  // super version (memtables and files). A flush or compaction installed in between could
  // have dropped a version visible at that sequence, so the pair is kept only if no family's
  // super version changed around the call; otherwise it is taken again. Such changes are
  // milliseconds apart, the call microseconds long: a retry is rare and a second one rarer.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::vector<uint64_t> before;
    for (int cf : cf_indexes) before.push_back(SuperVersionNumber(db, cf));
    std::vector<rocksdb::Iterator*> raw;
    rocksdb::Status st = db->raw()->NewIterators(ro, handles, &raw);
    out->clear();
    for (auto* it : raw) out->emplace_back(it);
    if (!st.ok()) return st;
    bool stable = true;
    for (size_t i = 0; i < cf_indexes.size() && stable; ++i) {
      stable = SuperVersionNumber(db, cf_indexes[i]) == before[i];
    }
    if (stable) return rocksdb::Status::OK();
  }
  // Never seen; a registered snapshot is always consistent (at the price described above).
  out->clear();
  rocksdb::ReadOptions pinned = ro;
  pinned.snapshot = db->raw()->GetSnapshot();
  std::vector<rocksdb::Iterator*> raw;
  rocksdb::Status st = db->raw()->NewIterators(pinned, handles, &raw);
  db->raw()->ReleaseSnapshot(pinned.snapshot);
  for (auto* it : raw) out->emplace_back(it);
  return st;
}

FullSnapshotWriter::FullSnapshotWriter(StateDB* db, std::vector<SnapshotColumn> columns,
                                       int prefix_bytes, int32_t kg_start, int32_t kg_end,
                                       bool compress)
    : columns_(std::move(columns)),
      prefix_bytes_(prefix_bytes),
      kg_start_(kg_start),
      kg_end_(kg_end),
      compress_(compress),
      upper_(KeyGroupBound(kg_end + 1, prefix_bytes)) {
  upper_slice_ = rocksdb::Slice(upper_);
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;  // a full pass must not evict the working set
  ro.readahead_size = 2 << 20;
  ro.iterate_upper_bound = (kg_end_ + 1 < (1 << (8 * prefix_bytes_))) ? &upper_slice_ : nullptr;
  std::vector<int> cfs;
  for (const auto& col : columns_) cfs.push_back(col.cf_index);
  ttl_now_ = db->ttl_time();
  for (const auto& col : columns_) {
    std::shared_ptr<const TtlState> ttl = db->ttl(col.cf_index);
    const int64_t duration = ttl != nullptr ? ttl->ttl_ms() : 0;
    const bool purge = duration > 0 && ttl_now_ != kTtlTimeUnset;
    ttl_.push_back(purge ? ttl : nullptr);
    ttl_ms_.push_back(duration);
  }
  try {
    status_ = NewConsistentIterators(db, ro, cfs, &iterators_);
  } catch (const std::bad_alloc&) {
    iterators_.clear();
    status_ = rocksdb::Status::MemoryLimit("out of memory while pinning a snapshot");
  }
  PinTo(db);
}

FullSnapshotWriter::~FullSnapshotWriter() { Unpin(); }

rocksdb::Status FullSnapshotWriter::Write(const std::string& path, const std::string& meta_block,
                                          bool durable, std::vector<KeyGroupOffset>* offsets,
                                          SnapshotStats* stats) {
  if (!status_.ok()) return status_;
  if (iterators_.size() != columns_.size()) {
    return rocksdb::Status::Aborted("the snapshot was released before it was written");
  }
  try {
    return WriteStream(path, meta_block, durable, offsets, stats);
  } catch (const std::bad_alloc&) {
    return rocksdb::Status::MemoryLimit("out of memory while writing a snapshot to " + path);
  }
}

rocksdb::Status FullSnapshotWriter::WriteStream(const std::string& path,
                                                const std::string& meta_block, bool durable,
                                                std::vector<KeyGroupOffset>* offsets,
                                                SnapshotStats* stats) {
  const std::string lower = KeyGroupBound(kg_start_, prefix_bytes_);
  std::vector<MergeIterator::Input> inputs;
  for (size_t i = 0; i < columns_.size(); ++i) {
    std::unique_ptr<rocksdb::Iterator> it = std::move(iterators_[i]);
    if (ttl_[i] != nullptr) it = NewTtlPurgingIterator(std::move(it), ttl_[i], ttl_now_, ttl_ms_[i]);
    it->Seek(lower);
    inputs.push_back({std::move(it), columns_[i].state_id});
  }
  iterators_.clear();  // a snapshot is written once
  MergeIterator merged(std::move(inputs), prefix_bytes_);

  FileWriter out;
  rocksdb::Status st = out.Open(path, durable);
  if (!st.ok()) return st;
  st = out.Append(meta_block.data(), meta_block.size());
  if (!st.ok()) return st;

  // Entries are encoded straight into buf; the "last pair of a run" bit is set afterwards at
  // key_pos (key[0] of the newest entry) once the next entry shows that a run ended, so no
  // entry is copied twice. A full buf is handed on without its newest entry, whose bit may
  // still change.
  BlockPipeline pipeline(&out, compress_, offsets);
  BlockBuffer buf;
  size_t entry_pos = 0, key_pos = 0;
  bool have_entry = false;
  uint64_t n = 0, raw_bytes = 0;
  bool producing = true;
  // The state every byte of buf belongs to (FramedWriter::kMixed once runs share it): a
  // state's run of some size goes out as blocks of its own, so the framing can learn per
  // state whether its chunks compress.
  int block_state = FramedWriter::kMixed;
  auto end_group = [&]() {
    buf.at(key_pos) = static_cast<char>(buf.at(key_pos) | kMetaFollowsFlag);
    buf.PutU16(kEndOfKeyGroupMark);
    producing = pipeline.Push(BlockPipeline::Kind::kData, 0, buf.Take(buf.used()), block_state) &&
                pipeline.Push(BlockPipeline::Kind::kEnd, 0);
  };

  while (producing && merged.Valid()) {
    if ((++n & 4095) == 0 && cancelled_.load(std::memory_order_relaxed)) {
      pipeline.Finish();
      return rocksdb::Status::Incomplete("snapshot cancelled");
    }
    if (merged.is_new_key_group()) {
      if (have_entry) end_group();
      if (!producing) break;
      producing = pipeline.Push(BlockPipeline::Kind::kBegin, merged.key_group());
      block_state = merged.state_id();
      buf.PutU16(static_cast<uint16_t>(merged.state_id()));
    } else if (merged.is_new_state()) {
      buf.at(key_pos) = static_cast<char>(buf.at(key_pos) | kMetaFollowsFlag);
      if (buf.used() >= kMinRunBlockBytes) {  // the finished run's bytes are final: hand over
        producing = pipeline.Push(BlockPipeline::Kind::kData, 0, buf.Take(buf.used()),
                                  block_state);
        block_state = merged.state_id();
      } else if (buf.used() > 0) {
        block_state = FramedWriter::kMixed;
      }
      buf.PutU16(static_cast<uint16_t>(merged.state_id()));
    }
    const rocksdb::Slice k = merged.key(), v = merged.value();
    entry_pos = buf.PutEntry(k, v);
    key_pos = entry_pos + 4;
    have_entry = true;
    raw_bytes += k.size() + v.size();
    if (buf.used() >= kBlockBytes && entry_pos > 0) {
      producing = pipeline.Push(BlockPipeline::Kind::kData, 0, buf.Take(entry_pos), block_state);
      block_state = merged.state_id();  // what stays behind is the newest entry
      key_pos -= entry_pos;
      entry_pos = 0;
    }
    merged.Next();
  }
  if (producing && have_entry) end_group();
  stats->entries += n;
  stats->raw_bytes += raw_bytes;
  st = pipeline.Finish();
  if (!st.ok()) return st;
  if (!merged.status().ok()) return merged.status();
  stats->file_bytes = out.offset();
  stats->file_crc32c = out.crc();
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
