#include "snapshot_reader.h"

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

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

rocksdb::Status BatchSink::Put(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value) {
  return batch_.Put(db_->handle(cf), key, value);
}

rocksdb::Status BatchSink::EndKeyGroup() {
  rocksdb::Status st;
  if (batch_.Count() > 0) st = db_->Write(&batch_);
  batch_.Clear();
  return st;
}

namespace {
constexpr uint64_t kSstFileBytes = 64ull << 20;
}

SstSink::~SstSink() {
  for (auto& col : columns_) {
    if (col.writer) col.writer.reset();
    for (const auto& f : col.files) std::remove(f.c_str());  // ingested files were moved away
  }
}

rocksdb::Status SstSink::Roll(int cf, Column* col) {
  if (col->writer) {
    rocksdb::Status st = col->writer->Finish();
    if (!st.ok()) return st;
  }
  col->files.push_back(dir_ + "/restore-" + std::to_string(cf) + "-" +
                       std::to_string(next_file_++) + ".sst");
  col->writer = std::make_unique<rocksdb::SstFileWriter>(rocksdb::EnvOptions(),
                                                         db_->SstFileOptions(cf), db_->handle(cf));
  return col->writer->Open(col->files.back());
}

rocksdb::Status SstSink::Put(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value) {
  if (columns_.size() <= static_cast<size_t>(cf)) columns_.resize(cf + 1);
  Column& col = columns_[cf];
  if (!col.writer || col.writer->FileSize() >= kSstFileBytes) {
    rocksdb::Status st = Roll(cf, &col);
    if (!st.ok()) return st;
  }
  return col.writer->Put(key, value);
}

rocksdb::Status SstSink::Finish() {
  for (size_t cf = 0; cf < columns_.size(); ++cf) {
    Column& col = columns_[cf];
    if (!col.writer) continue;
    rocksdb::Status st = col.writer->Finish();
    col.writer.reset();
    if (!st.ok()) return st;
    rocksdb::IngestExternalFileOptions io;
    io.move_files = true;
    io.allow_blocking_flush = true;
    st = db_->raw()->IngestExternalFile(db_->handle(static_cast<int>(cf)), col.files, io);
    if (!st.ok()) return st;
    col.files.clear();
  }
  return rocksdb::Status::OK();
}

rocksdb::Status FullSnapshotReader::RestoreKeyGroup(int32_t kg, uint64_t offset, bool compressed,
                                                    int prefix_bytes,
                                                    const std::vector<int>& cf_for_state,
                                                    RestoreSink* sink, RestoreStats* stats) {
  auto corrupt = [&](const std::string& why) {
    return rocksdb::Status::Corruption(in_.path(), "key group " + std::to_string(kg) + ": " + why);
  };
  GroupSource src(&in_, compressed);
  rocksdb::Status st = src.Begin(offset);
  if (!st.ok()) return st;
  uint16_t state_id;
  if (!(st = src.ReadU16(&state_id, "a state id")).ok()) return st;
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
        if (!(st = sink->Put(cf, key_, value_)).ok()) return st;
      }
      ++entries;
      bytes += key_.size() + value_.size();
      if (last) break;
    }
    if (!(st = src.ReadU16(&state_id, "a state id or end mark")).ok()) return st;
  }
  if (!(st = sink->EndKeyGroup()).ok()) return st;
  stats->entries += entries;
  stats->raw_bytes += bytes;
  stats->key_groups++;
  return rocksdb::Status::OK();
}

struct ThreadedSink::Shared {
  std::mutex mu;
  std::condition_variable ready, space;
  std::deque<std::string> queue;
  bool done = false;
  rocksdb::Status status;
  std::thread thread;
};

namespace {
constexpr size_t kShipBytes = 1 << 20;
constexpr size_t kShipDepth = 8;

void PutRaw32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
uint32_t GetRaw32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
}  // namespace

ThreadedSink::ThreadedSink(std::unique_ptr<RestoreSink> inner)
    : inner_(std::move(inner)), shared_(std::make_unique<Shared>()) {
  block_.reserve(kShipBytes + 4096);
  Shared* sh = shared_.get();
  RestoreSink* in = inner_.get();
  sh->thread = std::thread([sh, in] {
    for (;;) {
      std::string block;
      {
        std::unique_lock<std::mutex> lock(sh->mu);
        sh->ready.wait(lock, [sh] { return !sh->queue.empty() || sh->done; });
        if (sh->queue.empty()) return;
        block = std::move(sh->queue.front());
        sh->queue.pop_front();
        sh->space.notify_one();
      }
      rocksdb::Status st;
      for (size_t pos = 0; st.ok() && pos < block.size();) {
        const int cf = static_cast<int>(GetRaw32(block.data() + pos));
        const uint32_t kn = GetRaw32(block.data() + pos + 4);
        const uint32_t vn = GetRaw32(block.data() + pos + 8);
        pos += 12;
        st = in->Put(cf, rocksdb::Slice(block.data() + pos, kn),
                     rocksdb::Slice(block.data() + pos + kn, vn));
        pos += kn + vn;
      }
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(sh->mu);
        sh->status = st;
        sh->queue.clear();
        sh->space.notify_all();
        return;
      }
    }
  });
}

ThreadedSink::~ThreadedSink() {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->done = true;
    shared_->ready.notify_one();
  }
  if (shared_->thread.joinable()) shared_->thread.join();
}

rocksdb::Status ThreadedSink::Ship() {
  std::unique_lock<std::mutex> lock(shared_->mu);
  shared_->space.wait(lock, [this] {
    return shared_->queue.size() < kShipDepth || !shared_->status.ok();
  });
  if (!shared_->status.ok()) return shared_->status;
  shared_->queue.push_back(std::move(block_));
  shared_->ready.notify_one();
  block_.clear();
  block_.reserve(kShipBytes + 4096);
  return rocksdb::Status::OK();
}

rocksdb::Status ThreadedSink::Put(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value) {
  PutRaw32(&block_, static_cast<uint32_t>(cf));
  PutRaw32(&block_, static_cast<uint32_t>(key.size()));
  PutRaw32(&block_, static_cast<uint32_t>(value.size()));
  block_.append(key.data(), key.size());
  block_.append(value.data(), value.size());
  return block_.size() >= kShipBytes ? Ship() : rocksdb::Status::OK();
}

rocksdb::Status ThreadedSink::EndKeyGroup() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->status;
}

rocksdb::Status ThreadedSink::Finish() {
  if (!block_.empty()) {
    rocksdb::Status st = Ship();
    if (!st.ok()) return st;
  }
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->done = true;
    shared_->ready.notify_one();
  }
  if (shared_->thread.joinable()) shared_->thread.join();
  if (!shared_->status.ok()) return shared_->status;
  return inner_->Finish();
}

rocksdb::Status RestoreSections(StateDB* db, int prefix_bytes,
                                const std::vector<SnapshotFile>& files,
                                const std::vector<SectionRef>& sections,
                                const std::string& sst_dir, RestoreStats* stats) {
  std::vector<std::unique_ptr<FullSnapshotReader>> readers;
  for (const auto& f : files) {
    readers.push_back(std::make_unique<FullSnapshotReader>());
    rocksdb::Status st = readers.back()->Open(f.path);
    if (!st.ok()) return st;
  }
  std::unique_ptr<RestoreSink> sink;
  if (sst_dir.empty()) {
    sink = std::make_unique<BatchSink>(db);
  } else {
    sink = std::make_unique<ThreadedSink>(std::make_unique<SstSink>(db, sst_dir));
  }
  for (const auto& s : sections) {
    if (s.file < 0 || static_cast<size_t>(s.file) >= files.size()) {
      return rocksdb::Status::InvalidArgument("section refers to an unknown snapshot file");
    }
    const SnapshotFile& f = files[s.file];
    rocksdb::Status st = readers[s.file]->RestoreKeyGroup(s.key_group, s.offset, f.compressed,
                                                          prefix_bytes, f.cf_for_state,
                                                          sink.get(), stats);
    if (!st.ok()) return st;
  }
  return sink->Finish();
}

}  // namespace stateengine
