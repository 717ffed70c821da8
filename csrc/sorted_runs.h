// A batch read of many sorted keys, table file by table file instead of through one merged
// iterator. RocksDB's iterator merges every sorted run (each level-0 file, each deeper level)
// into one stream: each step pays a heap update across the runs and a skip over every older
// version of the key it just returned, so a walk over N runs costs more than N walks over
// one. A state whose batch puts are ingested as table files (batch_ingest.h) gains a run per
// batch until a compaction merges them, and its dense reads grew by ~0.1 µs per key and run.
//
// SortedRuns reads each run with its own iterator instead: a key is looked up in the newest
// run first and in older runs only while it is not found, each run's iterator moving forward
// only. That is what the merged iterator returns exactly when no run hides a key from an
// older one by anything but a newer value: so Open declines (and the caller walks the merged
// iterator) when the memtables hold anything, when a table file holds a range tombstone or a
// merge operand, when a run other than the oldest holds a point tombstone, when a read
// snapshot is asked for, or when a file cannot be opened (a compaction deleted it since the
// listing). The files are opened up front, so a decline happens before any key is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/sst_file_reader.h>

#include "codec.h"

namespace stateengine {

class StateDB;

// A forward read of sorted keys steps to a wanted key up to this many entries ahead and seeks
// one further away (batch_ops.cc's MergedRead and SortedRuns alike).
constexpr size_t kReadMaxSteps = 16;

// Bytewise order of a and b: keys of 8 to 16 bytes (a key group and a bigint, most keys of a
// batch read) as two big-endian words, without a call to memcmp.
inline int CompareKeys(const rocksdb::Slice& a, const rocksdb::Slice& b) {
  const size_t n = a.size();
  if (n != b.size() || n < 8 || n > 16) return a.compare(b);
  uint64_t x = GetBE64(a.data()), y = GetBE64(b.data());
  if (x == y) {  // the last 8 bytes (overlapping the equal first ones where n < 16)
    x = GetBE64(a.data() + n - 8);
    y = GetBE64(b.data() + n - 8);
  }
  return x < y ? -1 : (x > y ? 1 : 0);
}

// Moves a positioned iterator forward to the first entry at or after key: stepped to when it
// lies within kReadMaxSteps entries, sought beyond.
inline void StepTo(rocksdb::Iterator* it, const rocksdb::Slice& key) {
  for (size_t steps = 0; it->Valid(); ++steps) {
    if (CompareKeys(it->key(), key) >= 0) return;
    if (steps == kReadMaxSteps) {
      it->Seek(key);
      return;
    }
    it->Next();
  }
}

class SortedRuns {
 public:
  // The column family's runs holding keys in [first, last], newest first; *out stays empty
  // where this read would not return what the merged iterator returns (above) or the runs
  // span more than kMaxFiles files. Never fails: a decline is the caller's cue to iterate.
  static void Open(StateDB* db, rocksdb::ColumnFamilyHandle* h, const rocksdb::Slice& first,
                   const rocksdb::Slice& last, std::unique_ptr<SortedRuns>* out);
  ~SortedRuns();

  // The stored value of key (*found false where none is stored), valid until the next call.
  // Keys must come in increasing order, each after the previous one.
  rocksdb::Status Find(const rocksdb::Slice& key, bool* found, rocksdb::Slice* value);

  // More table files than this in the read's range: the merged iterator opens them as needed
  // from RocksDB's table cache, where this read would open each one again.
  static constexpr size_t kMaxFiles = 64;

 private:
  struct File {
    std::string smallest, largest;  // user keys
    std::unique_ptr<rocksdb::SstFileReader> reader;
    std::unique_ptr<rocksdb::Iterator> it;  // created at the file's first lookup
  };
  // One level-0 file, or one deeper level (files in key order, none overlapping another).
  struct Run {
    std::vector<File> files;
    size_t at = 0;  // the file the last lookup ended in
  };

  SortedRuns() = default;
  rocksdb::Status FindIn(Run* run, const rocksdb::Slice& key, bool* found,
                         rocksdb::Slice* value);

  std::string upper_;  // past the batch's last key: no iterator loads a block beyond it
  rocksdb::Slice upper_slice_;
  rocksdb::ReadOptions ro_;
  std::vector<Run> runs_;
};

}  // namespace stateengine
