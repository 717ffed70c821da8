#include "checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "batch_ingest.h"
#include "keygroups.h"
#include "status_guard.h"

namespace stateengine {
namespace {

bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The first `size` bytes of src into a new file dst: the MANIFEST as it stood when the live
// files were listed (RocksDB may append to it afterwards).
rocksdb::Status CopyPrefix(const std::string& src, const std::string& dst, uint64_t size) {
  const int in = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return rocksdb::Status::IOError("opening " + src, std::strerror(errno));
  const int out = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    const int err = errno;
    ::close(in);
    return rocksdb::Status::IOError("creating " + dst, std::strerror(err));
  }
  const size_t cap = static_cast<size_t>(std::min<uint64_t>(size, 1 << 20));
  std::unique_ptr<char[]> buf(new char[cap]);  // uninitialised: a MANIFEST is often a few KiB
  rocksdb::Status st;
  while (size > 0 && st.ok()) {
    const ssize_t n = ::read(in, buf.get(), std::min<uint64_t>(size, cap));
    if (n <= 0) {
      st = n == 0 ? rocksdb::Status::Corruption(src + " is shorter than RocksDB recorded")
                  : rocksdb::Status::IOError("reading " + src, std::strerror(errno));
      break;
    }
    for (ssize_t done = 0; done < n && st.ok();) {
      const ssize_t w = ::write(out, buf.get() + done, n - done);
      if (w < 0) st = rocksdb::Status::IOError("writing " + dst, std::strerror(errno));
      else done += w;
    }
    size -= static_cast<uint64_t>(n);
  }
  ::close(in);
  if (::close(out) != 0 && st.ok()) st = rocksdb::Status::IOError("closing " + dst, std::strerror(errno));
  return st;
}

rocksdb::Status WriteSmallFile(const std::string& path, const std::string& contents) {
  const int out = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) return rocksdb::Status::IOError("creating " + path, std::strerror(errno));
  const bool ok = ::write(out, contents.data(), contents.size()) ==
                  static_cast<ssize_t>(contents.size());
  const int err = errno;
  if (::close(out) != 0 || !ok) return rocksdb::Status::IOError("writing " + path, std::strerror(err));
  return rocksdb::Status::OK();
}

// Links (tables, blobs, OPTIONS: immutable) or copies (MANIFEST up to its recorded size,
// CURRENT naming it) the live files into dir. The WAL is off, so no log file holds anything
// the flush did not put into a table: RocksDB's Checkpoint would still list, open and copy
// the (empty) live log, which is most of its cost on a small state.
rocksdb::Status LinkLiveFiles(rocksdb::DB* db, const std::string& dir) {
  std::vector<std::string> files;
  uint64_t manifest_size = 0;
  rocksdb::Status st = db->GetLiveFiles(files, &manifest_size, /*flush_memtable=*/true);
  if (!st.ok()) return st;
  rocksdb::Env* env = db->GetEnv();
  const std::string& src_dir = db->GetName();
  std::string manifest;
  for (const std::string& entry : files) {  // names as "/000012.sst", "/MANIFEST-000005"
    const std::string name = entry.substr(entry.find_first_not_of('/'));
    const std::string src = src_dir + "/" + name, dst = dir + "/" + name;
    if (name == "CURRENT") continue;  // written below, naming the MANIFEST copied here
    if (name.rfind("MANIFEST-", 0) == 0) {
      manifest = name;
      st = CopyPrefix(src, dst, manifest_size);
    } else if (EndsWith(name, ".sst") || EndsWith(name, ".blob") ||
               name.rfind("OPTIONS-", 0) == 0) {
      st = env->LinkFile(src, dst);
    } else {
      st = rocksdb::Status::NotSupported("unexpected live file " + name);
    }
    if (!st.ok()) return st;
  }
  if (manifest.empty()) return rocksdb::Status::Corruption("RocksDB listed no MANIFEST");
  return WriteSmallFile(dir + "/CURRENT", manifest + "\n");
}

}  // namespace

rocksdb::Status CreateCheckpoint(StateDB* db, const std::string& dir) {
  return GuardStatus("creating a checkpoint", [&]() -> rocksdb::Status {
    rocksdb::DB* raw = db->raw();
    rocksdb::Env* env = raw->GetEnv();
    rocksdb::Status st = env->FileExists(dir);
    if (st.ok()) return rocksdb::Status::InvalidArgument("checkpoint directory exists: " + dir);
    if (!st.IsNotFound()) return st;
    if (!(st = env->CreateDir(dir)).ok()) return st;
    // no file the listing names may be deleted (by a compaction finishing) before it is linked
    if ((st = raw->DisableFileDeletions()).ok()) {
      st = LinkLiveFiles(raw, dir);
      rocksdb::Status enabled = raw->EnableFileDeletions(/*force=*/false);
      if (st.ok()) st = enabled;
    }
    if (!st.ok()) {  // leave no partial directory behind
      std::vector<std::string> children;
      if (env->GetChildren(dir, &children).ok()) {
        for (const auto& c : children) {
          if (c != "." && c != "..") env->DeleteFile(dir + "/" + c).PermitUncheckedError();
        }
      }
      env->DeleteDir(dir).PermitUncheckedError();
    }
    return st;
  });
}

rocksdb::Status ClipToKeyGroupRange(StateDB* db, int prefix_bytes, int32_t kg_start,
                                    int32_t kg_end, int32_t max_parallelism) {
  for (size_t cf = 0; cf < db->num_column_families(); ++cf) {
    rocksdb::Status st;
    if (kg_start > 0) {
      st = db->DeleteRange(static_cast<int>(cf), KeyGroupBound(0, prefix_bytes),
                           KeyGroupBound(kg_start, prefix_bytes));
      if (!st.ok()) return st;
    }
    if (kg_end + 1 < max_parallelism) {
      st = db->DeleteRange(static_cast<int>(cf), KeyGroupBound(kg_end + 1, prefix_bytes),
                           KeyGroupBound(max_parallelism, prefix_bytes));
      if (!st.ok()) return st;
    }
  }
  return rocksdb::Status::OK();
}

namespace {

// A table file holds at most this many bytes of copied entries (RocksDB's own default target
// file size): later compactions of the copied range work file by file.
constexpr uint64_t kCopyFileBytes = 64ull << 20;
constexpr size_t kCopyBatchBytes = 4 << 20;
// On the memtable route, entries wait in `head` up to this many before they are written.
constexpr size_t kCopyHeadEntries = 4096;

rocksdb::Status WriteInBatches(StateDB* dst, rocksdb::ColumnFamilyHandle* h,
                               const std::vector<std::pair<std::string, std::string>>& entries) {
  rocksdb::WriteBatch batch;
  for (const auto& [k, v] : entries) {
    rocksdb::Status st = batch.Put(h, k, v);
    if (!st.ok()) return st;
    if (batch.GetDataSize() >= kCopyBatchBytes) {
      if (!(st = dst->Write(&batch)).ok()) return st;
      batch.Clear();
    }
  }
  return batch.Count() == 0 ? rocksdb::Status::OK() : dst->Write(&batch);
}

// Copies what `it` yields up to its upper bound into column family cf of dst. A range of at
// least the batch-ingest threshold becomes table files ingested where RocksDB places them: the
// key groups copied are ones dst holds nothing of, so into the last level beside the base's
// tables, where a flush and compaction would have taken the same entries after a memtable
// insert each. Smaller ranges, and ranges whose file would land below a level holding tables
// (IngestLandsInPlace), go through the memtable.
rocksdb::Status CopyRange(rocksdb::Iterator* it, StateDB* dst, int cf, const std::string& upper,
                          uint64_t* entries) {
  rocksdb::ColumnFamilyHandle* h = dst->handle(cf);
  const size_t min_keys = BatchIngestMinKeys();
  std::vector<std::pair<std::string, std::string>> head;  // until the range is known large
  std::unique_ptr<IngestedBatch> file;
  uint64_t file_bytes = 0;
  bool use_files = min_keys > 0;
  rocksdb::Status st;
  // The file's keys lie in [first, upper): upper, the range's exclusive bound, stands in for
  // its last key (a key-group bound sorts before every key of that group).
  auto open_file = [&](const rocksdb::Slice& first) -> rocksdb::Status {
    bool bottommost = false;
    if (!IngestLandsInPlace(dst, cf, first, upper, &bottommost)) {
      use_files = false;
      return rocksdb::Status::OK();
    }
    file = std::make_unique<IngestedBatch>(dst, cf, bottommost);
    file_bytes = 0;
    return file->Open();
  };
  for (; it->Valid(); it->Next()) {
    ++*entries;
    if (file == nullptr) {
      head.emplace_back(it->key().ToString(), it->value().ToString());
      if (!use_files || head.size() < min_keys) {
        if (!use_files && head.size() >= kCopyHeadEntries) {  // memtable route: as it goes
          if (!(st = WriteInBatches(dst, h, head)).ok()) return st;
          head.clear();
        }
        continue;
      }
      if (!(st = open_file(head.front().first)).ok()) return st;
      if (file == nullptr) continue;  // refused: the memtable takes the range
      for (const auto& [k, v] : head) {
        if (!(st = file->Put(k, v)).ok()) return st;
        file_bytes += k.size() + v.size();
      }
      head.clear();
      continue;
    }
    if (file_bytes >= kCopyFileBytes) {  // the next file starts at this entry
      if (!(st = file->Finish()).ok()) return st;
      file.reset();
      if (!(st = open_file(it->key())).ok()) return st;
      if (file == nullptr) {
        head.emplace_back(it->key().ToString(), it->value().ToString());
        continue;
      }
    }
    if (!(st = file->Put(it->key(), it->value())).ok()) return st;
    file_bytes += it->key().size() + it->value().size();
  }
  if (!it->status().ok()) return it->status();
  if (file != nullptr && !(st = file->Finish()).ok()) return st;
  return WriteInBatches(dst, h, head);
}

}  // namespace

rocksdb::Status CopyKeyGroupRange(StateDB* src, StateDB* dst,
                                  const std::vector<std::pair<int, int>>& cf_map,
                                  int prefix_bytes, int32_t kg_start, int32_t kg_end,
                                  uint64_t* entries) {
  return GuardStatus("copying key groups", [&]() -> rocksdb::Status {
    const std::string lower = KeyGroupBound(kg_start, prefix_bytes);
    const std::string upper = KeyGroupBound(kg_end + 1, prefix_bytes);
    rocksdb::Slice upper_slice(upper);
    for (const auto& [from, to] : cf_map) {
      rocksdb::ReadOptions ro;
      ro.fill_cache = false;
      ro.readahead_size = 2 << 20;
      ro.iterate_upper_bound = &upper_slice;
      std::unique_ptr<rocksdb::Iterator> it(src->raw()->NewIterator(ro, src->handle(from)));
      it->Seek(lower);
      rocksdb::Status st = CopyRange(it.get(), dst, to, upper, entries);
      if (!st.ok()) return st;
    }
    return rocksdb::Status::OK();
  });
}

}  // namespace stateengine
