#include "db_check.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/merge_operator.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/table.h>

#include "status_guard.h"

namespace stateengine {
namespace {

constexpr size_t kThreads = 4;

// A read-only open would otherwise create a LOG file in the directory it checks.
class SilentLogger : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char*, va_list) override {}
};

// Merge operands are read, not combined: any operand sequence is accepted here (the state's
// own operator is what checks their bytes, in the restoring process).
class KeepLastOperand : public rocksdb::MergeOperator {
 public:
  const char* Name() const override { return "stateengine.KeepLastOperand"; }
  bool FullMergeV2(const MergeOperationInput& in, MergeOperationOutput* out) const override {
    if (!in.operand_list.empty()) {
      out->existing_operand = in.operand_list.back();
    } else if (in.existing_value != nullptr) {
      out->existing_operand = *in.existing_value;
    }
    return true;
  }
};

uint64_t MicrosSince(std::chrono::steady_clock::time_point t) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now() - t)
                                   .count());
}

// A table checked before (its entries known good): only its first and last keys against the
// range this MANIFEST gives it, which may be a new MANIFEST's.
rocksdb::Status CheckTableRange(const rocksdb::Options& options,
                                const rocksdb::LiveFileMetaData& f,
                                const rocksdb::ReadOptions& ro) {
  const std::string file = f.directory + "/" + f.relative_filename;
  rocksdb::SstFileReader reader(options);
  rocksdb::Status st = reader.Open(file);
  if (!st.ok()) return st;
  std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(ro));
  const rocksdb::Comparator* cmp = rocksdb::BytewiseComparator();
  it->SeekToFirst();
  const bool low = !it->Valid() || cmp->Compare(it->key(), f.smallestkey) >= 0;
  it->SeekToLast();
  const bool high = !it->Valid() || cmp->Compare(it->key(), f.largestkey) <= 0;
  if (!it->status().ok()) return it->status();
  if (!low || !high) {
    return rocksdb::Status::Corruption(file, "holds keys outside the range its MANIFEST entry gives");
  }
  return rocksdb::Status::OK();
}

// Entries of a table between two of its keys: the unit of work of the lookups, so that a large
// table is looked up on several threads.
struct Chunk {
  const rocksdb::LiveFileMetaData* table;
  rocksdb::ColumnFamilyHandle* cf;
  std::string first;  // the chunk's first key
  std::string end;    // the next chunk's first key; empty: to the table's end
};
constexpr size_t kChunkEntries = 1 << 17;

// Every entry of one table file, read forwards and backwards and checked against the key range
// its MANIFEST entry gives; the table's chunks (every kChunkEntries-th key) are appended.
rocksdb::Status CheckTableOrder(const rocksdb::Options& options, const rocksdb::LiveFileMetaData& f,
                                rocksdb::ColumnFamilyHandle* cf, const rocksdb::ReadOptions& ro,
                                DbCheckStats* stats, std::vector<Chunk>* chunks) {
  const std::string file = f.directory + "/" + f.relative_filename;
  rocksdb::SstFileReader reader(options);
  rocksdb::Status st = reader.Open(file);
  if (!st.ok()) return st;
  if (!(st = reader.VerifyChecksum(ro)).ok()) return st;
  std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(ro));
  const rocksdb::Comparator* cmp = rocksdb::BytewiseComparator();
  std::string last;
  bool first = true;
  size_t seen = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    if (!first && cmp->Compare(key, last) <= 0) {
      return rocksdb::Status::Corruption(file, "keys out of order");
    }
    if (first && cmp->Compare(key, f.smallestkey) < 0) break;
    if (seen % kChunkEntries == 0) {
      if (!chunks->empty() && chunks->back().table == &f) chunks->back().end = key.ToString();
      chunks->push_back({&f, cf, key.ToString(), std::string()});
    }
    last.assign(key.data(), key.size());
    first = false;
    ++seen;
  }
  if (!it->status().ok()) return it->status();
  // Deleted keys are not seen, so the keys seen lie within the MANIFEST's range, not at its
  // ends; a file holding keys outside it would be skipped by lookups (a silent loss).
  if ((it->Valid() && first) || (!first && cmp->Compare(last, f.largestkey) > 0)) {
    return rocksdb::Status::Corruption(file, "holds keys outside the range its MANIFEST entry gives");
  }
  // Backwards too: Prev starts each step from a restart point, so every block's restart
  // array is followed (what a Seek's binary search reads), not only its entries in order.
  size_t back = 0;
  for (it->SeekToLast(); it->Valid() && back <= seen; it->Prev()) {
    if (back == 0 && it->key() != rocksdb::Slice(last)) break;
    ++back;
  }
  if (!it->status().ok()) return it->status();
  if (back != seen) {
    return rocksdb::Status::Corruption(file, "reads differently backwards than forwards");
  }
  stats->entries += seen;
  return rocksdb::Status::OK();
}

// Every key of a chunk found again by Seek (a binary search over the restart points), and by
// a Get through the database, as the restoring process looks keys up: merged with the other
// tables, blob indexes decoded, the data block's hash index and the Bloom filter used.
rocksdb::Status CheckChunkLookups(const rocksdb::Options& options, const Chunk& c,
                                  rocksdb::DB* db, const rocksdb::ReadOptions& ro) {
  const std::string file = c.table->directory + "/" + c.table->relative_filename;
  rocksdb::SstFileReader reader(options);
  rocksdb::Status st = reader.Open(file);
  if (!st.ok()) return st;
  std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(ro));
  std::unique_ptr<rocksdb::Iterator> seek(reader.NewIterator(ro));
  rocksdb::PinnableSlice value;
  const rocksdb::Slice end(c.end);
  for (it->Seek(c.first); it->Valid() && (c.end.empty() || it->key() != end); it->Next()) {
    seek->Seek(it->key());
    if (!seek->Valid() || seek->key() != it->key()) {
      if (!seek->status().ok()) return seek->status();
      return rocksdb::Status::Corruption(file, "a key is not found again by Seek");
    }
    value.Reset();
    st = db->Get(ro, c.cf, it->key(), &value);
    if (!st.ok() && !st.IsNotFound()) return st;  // not found: deleted by a newer table
  }
  return it->status();
}

// A key range read through the database, as the restoring process scans: every table holding
// keys in it Seeks to its start and is merged with the others. The range ends at largest
// (inclusive), or before `end` when that is not empty.
rocksdb::Status ScanThroughDb(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf,
                              const std::string& smallest, const std::string& largest,
                              const std::string& end) {
  rocksdb::ReadOptions ro;
  rocksdb::Slice lower(smallest);
  ro.iterate_lower_bound = &lower;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro, cf));
  const rocksdb::Comparator* cmp = rocksdb::BytewiseComparator();
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (end.empty() ? cmp->Compare(it->key(), largest) > 0 : cmp->Compare(it->key(), end) >= 0) {
      break;
    }
  }
  return it->status();
}

// The key ranges of the given tables of one column family, overlapping ones joined: tables
// of level 0 (and a restore's new tables) all span the whole key space, and a scan per table
// read the whole database once per table.
std::vector<std::pair<std::string, std::string>> JoinedRanges(
    std::vector<const rocksdb::LiveFileMetaData*> tables) {
  const rocksdb::Comparator* cmp = rocksdb::BytewiseComparator();
  std::sort(tables.begin(), tables.end(), [cmp](const auto* a, const auto* b) {
    return cmp->Compare(a->smallestkey, b->smallestkey) < 0;
  });
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto* f : tables) {
    if (!out.empty() && cmp->Compare(f->smallestkey, out.back().second) <= 0) {
      if (cmp->Compare(f->largestkey, out.back().second) > 0) out.back().second = f->largestkey;
    } else {
      out.emplace_back(f->smallestkey, f->largestkey);
    }
  }
  return out;
}

// Runs fn(i) for i in [0, n) on up to kThreads threads; the first error stops the rest.
rocksdb::Status InParallel(size_t n, const std::function<rocksdb::Status(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::vector<rocksdb::Status> results(std::min<size_t>(kThreads, n));
  std::atomic<bool> failed{false};
  auto work = [&](rocksdb::Status* out) {
    for (size_t i; !failed.load() && (i = next.fetch_add(1)) < n;) {
      *out = fn(i);
      if (!out->ok()) failed.store(true);
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < results.size(); ++i) threads.emplace_back(work, &results[i]);
  if (!results.empty()) work(&results[0]);
  for (auto& th : threads) th.join();
  for (const auto& r : results) {
    if (!r.ok()) return r;
  }
  return rocksdb::Status::OK();
}

rocksdb::Status Check(const std::string& path, const std::set<std::string>& trusted,
                      DbCheckStats* stats) {
  auto t = std::chrono::steady_clock::now();
  rocksdb::Options options;
  options.info_log = std::make_shared<SilentLogger>();
  options.paranoid_checks = true;
  std::vector<std::string> names;
  rocksdb::Status st = rocksdb::DB::ListColumnFamilies(options, path, &names);
  if (!st.ok()) return st;
  // Read the tables as the restoring process will: with a Bloom filter policy the filter
  // blocks are loaded (and parsed) when a table opens. Each table's index and filter are held
  // by its reader, as the restoring process pins them, so the Get of every key does not read
  // them again: through a small cache, a state of millions of keys evicted them all the time
  // (the filter blocks of a table are megabytes). They take about 1.5 bytes per key; data
  // blocks go through a small cache.
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(32 << 20);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10, false));
  table.cache_index_and_filter_blocks = false;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  options.merge_operator = std::make_shared<KeepLastOperand>();
  options.force_consistency_checks = true;
  std::vector<rocksdb::ColumnFamilyDescriptor> descs;
  for (const auto& name : names) descs.emplace_back(name, rocksdb::ColumnFamilyOptions(options));
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  // The MANIFEST replay, and every live table opened (footer, index, filter, properties and
  // range deletions parsed): max_open_files is -1.
  st = rocksdb::DB::OpenForReadOnly(rocksdb::DBOptions(options), path, descs, &handles, &raw);
  if (!st.ok()) return st;
  // The tables are read through their own readers: the database only lists them.
  std::unique_ptr<rocksdb::DB> db(raw);
  stats->open_us = MicrosSince(t);
  t = std::chrono::steady_clock::now();
  std::vector<rocksdb::LiveFileMetaData> files;
  db->GetLiveFilesMetaData(&files);
  const rocksdb::SequenceNumber last_sequence = db->GetLatestSequenceNumber();
  stats->column_families = handles.size();
  struct Handles {  // released before the database closes, on every return
    rocksdb::DB* db;
    std::vector<rocksdb::ColumnFamilyHandle*>* hs;
    ~Handles() {
      for (auto* h : *hs) db->DestroyColumnFamilyHandle(h);
    }
  } release{db.get(), &handles};
  for (const auto& f : files) {
    if (f.largest_seqno > last_sequence || f.smallest_seqno > f.largest_seqno) {
      return rocksdb::Status::Corruption(f.relative_filename,
                                         "sequence numbers beyond the MANIFEST's last sequence");
    }
  }
  stats->files = files.size();
  // The checkpoint's tables and the MANIFEST's must be the same set, none of them in RocksDB's
  // default column family (no state uses it): an edit that moves a table to another family or
  // drops it from the MANIFEST is otherwise a valid database missing a state's data.
  std::set<std::string> live;
  for (const auto& f : files) {
    live.insert(f.relative_filename);
    if (f.column_family_name == rocksdb::kDefaultColumnFamilyName) {
      return rocksdb::Status::Corruption(f.relative_filename,
                                         "is in RocksDB's default column family, which no state uses");
    }
  }
  std::vector<std::string> children;
  if (!(st = rocksdb::Env::Default()->GetChildren(path, &children)).ok()) return st;
  for (const auto& name : children) {
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".sst") == 0 && live.count(name) == 0) {
      return rocksdb::Status::Corruption(name, "is not in the MANIFEST's tables");
    }
  }
  // Tables are read on up to kThreads threads: a restore waits for this.
  std::vector<const rocksdb::LiveFileMetaData*> todo;
  rocksdb::ReadOptions range_ro;
  range_ro.fill_cache = false;
  for (const auto& f : files) {
    if (trusted.count(f.relative_filename) == 0) {
      todo.push_back(&f);
    } else if (!(st = CheckTableRange(options, f, range_ro)).ok()) {
      return st;
    }
  }
  stats->scanned = todo.size();
  auto family = [&](const std::string& name) -> rocksdb::ColumnFamilyHandle* {
    for (size_t k = 0; k < names.size(); ++k) {
      if (names[k] == name) return handles[k];
    }
    return nullptr;
  };
  std::atomic<size_t> entries{0};
  std::mutex chunks_mu;
  std::vector<Chunk> chunks;
  rocksdb::ReadOptions ro;
  ro.readahead_size = 2 << 20;
  st = InParallel(todo.size(), [&](size_t i) {
    rocksdb::ColumnFamilyHandle* cf = family(todo[i]->column_family_name);
    if (cf == nullptr) return rocksdb::Status::Corruption(todo[i]->relative_filename, "in no column family");
    DbCheckStats mine;
    std::vector<Chunk> found;
    rocksdb::Status r = GuardStatus("checking a table", [&] {
      return CheckTableOrder(options, *todo[i], cf, ro, &mine, &found);
    });
    entries += mine.entries;
    std::lock_guard<std::mutex> lock(chunks_mu);
    chunks.insert(chunks.end(), found.begin(), found.end());
    return r;
  });
  if (st.ok()) {
    st = InParallel(chunks.size(), [&](size_t i) {
      return GuardStatus("looking up a table's keys", [&] {
        return CheckChunkLookups(options, chunks[i], db.get(), ro);
      });
    });
  }
  // The tables' key ranges read through the database, joined where they overlap and cut at
  // the chunks' first keys (a scan per piece), and each table's first key sought through it.
  struct Range {
    rocksdb::ColumnFamilyHandle* cf;
    std::string smallest, largest, end;
  };
  std::vector<Range> ranges;
  const rocksdb::Comparator* cmp = rocksdb::BytewiseComparator();
  for (size_t k = 0; st.ok() && k < names.size(); ++k) {
    std::vector<const rocksdb::LiveFileMetaData*> tables;
    std::vector<std::string> cuts;
    for (const auto* f : todo) {
      if (f->column_family_name == names[k]) tables.push_back(f);
    }
    for (const auto& c : chunks) {
      if (c.cf == handles[k]) cuts.push_back(c.first);
    }
    std::sort(cuts.begin(), cuts.end(), [cmp](const std::string& a, const std::string& b) {
      return cmp->Compare(a, b) < 0;
    });
    for (auto& [lo, hi] : JoinedRanges(tables)) {
      std::string from = lo;
      for (const auto& cut : cuts) {
        if (cmp->Compare(cut, from) > 0 && cmp->Compare(cut, hi) <= 0) {
          ranges.push_back({handles[k], from, hi, cut});
          from = cut;
        }
      }
      ranges.push_back({handles[k], from, hi, std::string()});
    }
  }
  if (st.ok()) {
    st = InParallel(ranges.size(), [&](size_t i) {
      return GuardStatus("reading a key range", [&] {
        const Range& r = ranges[i];
        return ScanThroughDb(db.get(), r.cf, r.smallest, r.largest, r.end);
      });
    });
  }
  if (st.ok()) {
    st = InParallel(todo.size(), [&](size_t i) {
      return GuardStatus("seeking a table's first key", [&] {
        std::unique_ptr<rocksdb::Iterator> it(
            db->NewIterator(rocksdb::ReadOptions(), family(todo[i]->column_family_name)));
        it->Seek(todo[i]->smallestkey);
        return it->status();
      });
    });
  }
  stats->entries = entries.load();
  stats->scan_us = MicrosSince(t);
  return st;
}

}  // namespace

rocksdb::Status CheckDbDirectory(const std::string& path, const std::set<std::string>& trusted,
                                 DbCheckStats* stats) {
  return GuardStatus("checking a checkpoint's RocksDB files",
                     [&] { return Check(path, trusted, stats); });
}

}  // namespace stateengine

extern "C" int stateengine_check_db(const char* path, const char* trusted, char* msg,
                                    size_t msg_len) {
  std::set<std::string> names;
  for (const char* p = trusted; p != nullptr && *p != '\0';) {
    const char* end = std::strchr(p, '\n');
    names.emplace(p, end == nullptr ? std::strlen(p) : static_cast<size_t>(end - p));
    p = end == nullptr ? nullptr : end + 1;
  }
  stateengine::DbCheckStats stats;
  const rocksdb::Status st = stateengine::CheckDbDirectory(path, names, &stats);
  const std::string text =
      st.ok() ? "ok " + std::to_string(stats.column_families) + " " +
                    std::to_string(stats.files) + " " + std::to_string(stats.scanned) + " " +
                    std::to_string(stats.entries) + " " + std::to_string(stats.open_us) + " " +
                    std::to_string(stats.scan_us)
              : st.ToString();
  if (msg_len > 0) {
    const size_t n = std::min(text.size(), msg_len - 1);
    std::memcpy(msg, text.data(), n);
    msg[n] = '\0';
  }
  if (st.ok()) return 0;
  if (st.IsIOError()) return 3;
  return st.IsCorruption() || st.IsInvalidArgument() || st.IsNotFound() ? 1 : 2;
}
