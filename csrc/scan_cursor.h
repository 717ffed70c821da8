// A scan over one column family that keeps its RocksDB iterator between calls and hands
// entries over in chunks, so Python iterates without holding the GIL across RocksDB.
// Invariant: a cursor reads one consistent view, that of the moment it was created (the
// iterator's implicit snapshot, which registers no RocksDB snapshot), whatever is written
// meanwhile; its iterator never outlives the StateDB (it is a DbPin), and once freed, Next
// reports Aborted.
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
  ScanCursor(StateDB* db, int cf, std::string lower, std::string upper, bool reverse);
  ~ScanCursor();
  // Appends up to limit entries (0: all) to out; *done once the range is exhausted.
  rocksdb::Status Next(size_t limit, std::vector<KeyValue>* out, bool* done);
  // Frees the iterator now (the cursor was dropped or finished).
  void Release() { Unpin(); }

 protected:
  void FreePinned() override { it_.reset(); }

 private:
  std::string lower_, upper_;
  rocksdb::Slice lower_slice_, upper_slice_;
  std::unique_ptr<rocksdb::Iterator> it_;
  bool reverse_;
  bool started_ = false;
};

}  // namespace stateengine
