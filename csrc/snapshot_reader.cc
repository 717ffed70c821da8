#include "snapshot_reader.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>

#include <sys/stat.h>

#include <rocksdb/write_batch.h>

#include "keygroups.h"
#include "snappy_frame.h"
#include "snapshot_writer.h"

namespace stateengine {
namespace {

constexpr uint32_t kMaxEntryBytes = 1u << 30;

uint32_t GetBE32At(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | u[3];
}

rocksdb::Status ReadU16(ChunkedReader* src, uint16_t* v) {
  unsigned char b[2];
  rocksdb::Status st = src->Read(reinterpret_cast<char*>(b), 2);
  *v = static_cast<uint16_t>((b[0] << 8) | b[1]);
  return st;
}

rocksdb::Status ReadBlob(ChunkedReader* src, const std::string& path, std::string* out,
                         const char* what) {
  char b[4];
  rocksdb::Status st = src->Read(b, 4);
  if (!st.ok()) return st;
  const uint32_t n = GetBE32At(b);
  if (n > kMaxEntryBytes || n > src->MaxRemaining()) {
    return rocksdb::Status::Corruption(
        path, "length " + std::to_string(n) + " of " + what + " exceeds what is left of the file");
  }
  out->clear();
  return src->Append(out, n);  // grows with the bytes read, never to n up front
}

// One `i32 len | key | i32 len | value` pair: in place when it lies inside the current chunk
// (the common case), else copied into key_buf / value_buf.
rocksdb::Status NextEntry(ChunkedReader* src, const std::string& path, std::string* key_buf,
                          std::string* value_buf, rocksdb::Slice* key, rocksdb::Slice* value,
                          char** key_first) {
  const size_t avail = src->available();
  if (avail >= 8) {
    char* p = src->view();
    const uint32_t kn = GetBE32At(p);
    if (kn <= kMaxEntryBytes && avail >= 8ull + kn) {
      const uint32_t vn = GetBE32At(p + 4 + kn);
      if (vn <= kMaxEntryBytes && avail >= 8ull + kn + vn) {
        *key = rocksdb::Slice(p + 4, kn);
        *value = rocksdb::Slice(p + 8 + kn, vn);
        *key_first = p + 4;
        src->Skip(8ull + kn + vn);
        return rocksdb::Status::OK();
      }
    }
  }
  rocksdb::Status st = ReadBlob(src, path, key_buf, "a key");
  if (!st.ok()) return st;
  if (!(st = ReadBlob(src, path, value_buf, "a value")).ok()) return st;
  *key = rocksdb::Slice(*key_buf);
  *value = rocksdb::Slice(*value_buf);
  *key_first = key_buf->empty() ? nullptr : &(*key_buf)[0];
  return st;
}

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
  // Uncompressed: block compression was half of the SST builder's work, and ingested files
  // are rewritten (compressed) by the first compaction that reaches their key range.
  rocksdb::Options options = db_->SstFileOptions(cf);
  options.compression = rocksdb::kNoCompression;
  // Kept in the page cache, as batch_ingest.cc's files: the restored state is read next.
  col->writer = std::make_unique<rocksdb::SstFileWriter>(rocksdb::EnvOptions(), options,
                                                         db_->handle(cf),
                                                         /*invalidate_page_cache=*/false);
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
  for (auto& col : columns_) {
    if (!col.writer) continue;
    rocksdb::Status st = col.writer->Finish();
    col.writer.reset();
    if (!st.ok()) return st;
  }
  return rocksdb::Status::OK();
}

std::vector<std::vector<std::string>> SstSink::TakeFiles() {
  std::vector<std::vector<std::string>> out(columns_.size());
  for (size_t cf = 0; cf < columns_.size(); ++cf) out[cf].swap(columns_[cf].files);
  return out;
}

namespace {

// One worker's share of a restore: its own readers, decoding on the calling thread and SST
// building on a second one.
struct RestoreShare {
  std::vector<SectionRef> sections;
  std::string dir;
  RestoreStats stats;
  rocksdb::Status status;
  std::vector<std::vector<std::string>> files;
  SstSink* sst = nullptr;
};

void RunShareUnguarded(StateDB* db, int prefix_bytes, const std::vector<SnapshotFile>& files,
                       RestoreShare* share) {
  std::vector<std::unique_ptr<FullSnapshotReader>> readers(files.size());
  auto sst = std::make_unique<SstSink>(db, share->dir);
  SstSink* raw_sst = sst.get();
  ThreadedSink sink(std::move(sst));
  for (const auto& s : share->sections) {
    if (!readers[s.file]) {
      readers[s.file] = std::make_unique<FullSnapshotReader>();
      if (!(share->status = readers[s.file]->Open(files[s.file].path)).ok()) return;
    }
    share->status = readers[s.file]->RestoreKeyGroup(s.key_group, s.offset,
                                                     files[s.file].compressed, prefix_bytes,
                                                     files[s.file].cf_for_state,
                                                     s.decode_only ? nullptr : &sink,
                                                     &share->stats, s.end);
    if (!share->status.ok()) return;
  }
  if ((share->status = sink.Finish()).ok()) share->files = raw_sst->TakeFiles();
}

// Runs on its own thread too, where an escaping exception would terminate the process.
void RunShare(StateDB* db, int prefix_bytes, const std::vector<SnapshotFile>& files,
              RestoreShare* share) {
  try {
    RunShareUnguarded(db, prefix_bytes, files, share);
  } catch (const std::bad_alloc&) {
    share->status = rocksdb::Status::MemoryLimit("out of memory while restoring a snapshot");
  } catch (const std::exception& e) {
    share->status = rocksdb::Status::Aborted(std::string("restore failed: ") + e.what());
  }
}

// Bytes of each section (up to the next section of its file, or the file's end): the shares
// are cut by bytes so both threads get similar work.
std::vector<uint64_t> SectionBytes(const std::vector<SnapshotFile>& files,
                                   const std::vector<SectionRef>& sections) {
  std::vector<std::vector<uint64_t>> starts(files.size());
  for (const auto& s : sections) starts[s.file].push_back(s.offset);
  std::vector<uint64_t> sizes(files.size(), 0);
  for (size_t f = 0; f < files.size(); ++f) {
    std::sort(starts[f].begin(), starts[f].end());
    FileReader r;
    if (r.Open(files[f].path).ok()) sizes[f] = r.size();
  }
  std::vector<uint64_t> out;
  for (const auto& s : sections) {
    const auto& st = starts[s.file];
    auto it = std::upper_bound(st.begin(), st.end(), s.offset);
    const uint64_t end = it == st.end() ? std::max(sizes[s.file], s.offset) : *it;
    out.push_back(end - s.offset);
  }
  return out;
}

}  // namespace

rocksdb::Status FullSnapshotReader::RestoreKeyGroup(int32_t kg, uint64_t offset, bool compressed,
                                                    int prefix_bytes,
                                                    const std::vector<int>& cf_for_state,
                                                    RestoreSink* sink, RestoreStats* stats,
                                                    uint64_t section_end) {
  auto corrupt = [&](const std::string& why) {
    return rocksdb::Status::Corruption(in_.path(), "key group " + std::to_string(kg) + ": " + why);
  };
  FramedReader framed(&in_);
  RawReader raw(&in_);
  ChunkedReader* src = compressed ? static_cast<ChunkedReader*>(&framed) : &raw;
  rocksdb::Status st = src->Begin(offset);
  if (!st.ok()) return st;
  uint16_t state_id;
  if (!(st = ReadU16(src, &state_id)).ok()) return st;
  uint64_t entries = 0, bytes = 0;
  rocksdb::Slice key, value;
  char* key_first = nullptr;
  while (state_id != kEndOfKeyGroupMark) {
    if (state_id >= cf_for_state.size()) return corrupt("unknown state id " + std::to_string(state_id));
    const int cf = cf_for_state[state_id];
    for (;;) {
      if (!(st = NextEntry(src, in_.path(), &key_, &value_, &key, &value, &key_first)).ok()) {
        return st;
      }
      if (key.size() < static_cast<size_t>(prefix_bytes)) return corrupt("key shorter than its prefix");
      const bool last = (static_cast<unsigned char>(key_first[0]) & kMetaFollowsFlag) != 0;
      key_first[0] = static_cast<char>(key_first[0] & ~kMetaFollowsFlag);  // our buffer
      if (ReadKeyGroupPrefix(key.data(), prefix_bytes) != kg) {
        return corrupt("entry of key group " +
                       std::to_string(ReadKeyGroupPrefix(key.data(), prefix_bytes)) +
                       " inside the section");
      }
      if (cf >= 0 && sink != nullptr) {
        if (!(st = sink->Put(cf, key, value)).ok()) return st;
      }
      ++entries;
      bytes += key.size() + value.size();
      if (last) break;
    }
    if (!(st = ReadU16(src, &state_id)).ok()) return st;
  }
  if (section_end != 0 && !src->EndsAt(section_end)) {
    // A section that ends before the next recorded one leaves bytes no offset accounts for
    // (a key group whose offset was lost); one that ends past it overlaps it.
    return corrupt("the section does not end where the next section recorded in its handle "
                   "begins (byte " + std::to_string(section_end) +
                   "): the handle's key-group offsets do not tile the file");
  }
  if (sink == nullptr) return rocksdb::Status::OK();
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

uint32_t GetRaw32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
}  // namespace

ThreadedSink::ThreadedSink(std::unique_ptr<RestoreSink> inner)
    : inner_(std::move(inner)), shared_(std::make_unique<Shared>()) {
  block_.resize(kShipBytes + 4096);
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
      try {
        for (size_t pos = 0; st.ok() && pos < block.size();) {
          const int cf = static_cast<int>(GetRaw32(block.data() + pos));
          const uint32_t kn = GetRaw32(block.data() + pos + 4);
          const uint32_t vn = GetRaw32(block.data() + pos + 8);
          pos += 12;
          st = in->Put(cf, rocksdb::Slice(block.data() + pos, kn),
                       rocksdb::Slice(block.data() + pos + kn, vn));
          pos += kn + vn;
        }
      } catch (const std::bad_alloc&) {  // an exception escaping a thread would terminate
        st = rocksdb::Status::MemoryLimit("out of memory while building restored SST files");
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
  block_.resize(used_);
  shared_->queue.push_back(std::move(block_));
  shared_->ready.notify_one();
  block_ = std::string();
  block_.resize(kShipBytes + 4096);
  used_ = 0;
  return rocksdb::Status::OK();
}

rocksdb::Status ThreadedSink::Put(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value) {
  // Written through a pointer into room sized ahead: appends per field cost more than the
  // copies themselves.
  const size_t need = 12 + key.size() + value.size();
  if (used_ + need > block_.size()) block_.resize(std::max(block_.size() * 2, used_ + need));
  char* p = &block_[used_];
  const uint32_t head[3] = {static_cast<uint32_t>(cf), static_cast<uint32_t>(key.size()),
                            static_cast<uint32_t>(value.size())};
  std::memcpy(p, head, 12);
  std::memcpy(p + 12, key.data(), key.size());
  std::memcpy(p + 12 + key.size(), value.data(), value.size());
  used_ += need;
  return used_ >= kShipBytes ? Ship() : rocksdb::Status::OK();
}

rocksdb::Status ThreadedSink::EndKeyGroup() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->status;
}

rocksdb::Status ThreadedSink::Finish() {
  if (used_ > 0) {
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

namespace {

rocksdb::Status RestoreSectionsUnguarded(StateDB* db, int prefix_bytes,
                                         const std::vector<SnapshotFile>& files,
                                         const std::vector<SectionRef>& sections,
                                         const std::string& sst_dir, RestoreStats* stats) {
  for (const auto& s : sections) {
    if (s.file < 0 || static_cast<size_t>(s.file) >= files.size()) {
      return rocksdb::Status::InvalidArgument("section refers to an unknown snapshot file");
    }
  }
  if (sst_dir.empty()) {  // targets that hold data: one write batch per key group
    std::vector<std::unique_ptr<FullSnapshotReader>> readers;
    for (const auto& f : files) {
      readers.push_back(std::make_unique<FullSnapshotReader>());
      rocksdb::Status st = readers.back()->Open(f.path);
      if (!st.ok()) return st;
    }
    BatchSink sink(db);
    for (const auto& s : sections) {
      const SnapshotFile& f = files[s.file];
      rocksdb::Status st = readers[s.file]->RestoreKeyGroup(
          s.key_group, s.offset, f.compressed, prefix_bytes, f.cf_for_state,
          s.decode_only ? nullptr : &sink, stats, s.end);
      if (!st.ok()) return st;
    }
    return sink.Finish();
  }
  // Two shares of contiguous key groups, cut at half of the bytes: their SST files do not
  // overlap, so all of them are ingested together once both shares decoded completely.
  const std::vector<uint64_t> bytes = SectionBytes(files, sections);
  uint64_t total = 0;
  for (uint64_t b : bytes) total += b;
  RestoreShare shares[2];
  uint64_t seen = 0;
  for (size_t i = 0; i < sections.size(); ++i) {
    shares[seen * 2 < total ? 0 : 1].sections.push_back(sections[i]);
    seen += bytes[i];
  }
  shares[0].dir = sst_dir + "/a";
  shares[1].dir = sst_dir + "/b";
  for (auto& sh : shares) ::mkdir(sh.dir.c_str(), 0755);
  std::thread second([&] { RunShare(db, prefix_bytes, files, &shares[1]); });
  RunShare(db, prefix_bytes, files, &shares[0]);
  second.join();
  for (auto& sh : shares) {
    if (!sh.status.ok()) return sh.status;
  }
  size_t cfs = std::max(shares[0].files.size(), shares[1].files.size());
  for (size_t cf = 0; cf < cfs; ++cf) {
    std::vector<std::string> all;
    for (auto& sh : shares) {
      if (cf < sh.files.size()) all.insert(all.end(), sh.files[cf].begin(), sh.files[cf].end());
    }
    if (all.empty()) continue;
    rocksdb::IngestExternalFileOptions io;
    io.move_files = true;
    io.allow_blocking_flush = true;
    rocksdb::Status st = db->raw()->IngestExternalFile(db->handle(static_cast<int>(cf)), all, io);
    if (!st.ok()) return st;
  }
  for (auto& sh : shares) {
    stats->entries += sh.stats.entries;
    stats->raw_bytes += sh.stats.raw_bytes;
    stats->key_groups += sh.stats.key_groups;
  }
  return rocksdb::Status::OK();
}

}  // namespace

rocksdb::Status RestoreSections(StateDB* db, int prefix_bytes,
                                const std::vector<SnapshotFile>& files,
                                const std::vector<SectionRef>& sections,
                                const std::string& sst_dir, RestoreStats* stats) {
  try {
    return RestoreSectionsUnguarded(db, prefix_bytes, files, sections, sst_dir, stats);
  } catch (const std::bad_alloc&) {
    return rocksdb::Status::MemoryLimit("out of memory while restoring a snapshot");
  } catch (const std::exception& e) {
    return rocksdb::Status::Aborted(std::string("restore failed: ") + e.what());
  }
}

}  // namespace stateengine
