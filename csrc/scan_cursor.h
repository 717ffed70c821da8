// A scan over one column family that keeps its RocksDB iterator between calls and hands
// entries over in chunks, so Python iterates without holding the GIL across RocksDB.
// Invariant: a cursor reads one consistent view, that of the moment it was created (the
// iterator's implicit snapshot, which registers no RocksDB snapshot), whatever is written
// meanwhile; its iterator never outlives the StateDB (it is a DbPin), and once freed, Next
// reports Aborted. In a column family with TTL it yields what reads see (ttl.h): expired
// entries are skipped under NeverReturnExpired and timestamps are stripped; a cursor of state
// reads (access) also cleans up the expired entries it meets and, under OnReadAndWrite,
// stores what it yields with the time the cursor was created.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <rocksdb/iterator.h>

#include "db.h"

namespace stateengine {

class ScanCursor : public DbPin {
 public:
  // Entries with lower <= key < upper (an empty upper means unbounded), in key order or, if
  // reverse, from the largest key down.
  ScanCursor(StateDB* db, int cf, std::string lower, std::string upper, bool reverse,
             bool access = false);
  ~ScanCursor();
  // Appends up to limit entries (0: all) to out; *done once the range is exhausted.
  rocksdb::Status Next(size_t limit, std::vector<KeyValue>* out, bool* done);
  // Frees the iterator now (the cursor was dropped or finished).
  void Release() { Unpin(); }

 protected:
  void FreePinned() override { it_.reset(); }

 private:
  // Next's work, without the counting of rows read.
  rocksdb::Status Fill(size_t limit, std::vector<KeyValue>* out, bool* done);
  // Appends the entry under the iterator to out if a read sees it, and queues what the read
  // leaves behind; *taken says whether it was appended.
  rocksdb::Status TakeTtl(std::vector<KeyValue>* out, rocksdb::WriteBatch* writes, bool* taken);

  StateDB* db_;
  rocksdb::ColumnFamilyHandle* handle_;
  std::shared_ptr<const TtlState> ttl_;
  int64_t now_ = 0;
  bool access_;
  rocksdb::Status status_;
  std::string rewrite_;
  std::string lower_, upper_;
  rocksdb::Slice lower_slice_, upper_slice_;
  std::unique_ptr<rocksdb::Iterator> it_;
  bool reverse_;
  bool started_ = false;
};

}  // namespace stateengine
