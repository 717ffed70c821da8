// What a state backend's RocksDB holds right now: the figures a Spark user reads in a stateful
// operator's progress (rows, memory, files), gathered without scanning any data.
#pragma once

#include <cstdint>
#include <vector>

#include "db.h"

namespace stateengine {

struct DbMetrics {
  uint64_t estimated_keys = 0;    // rocksdb.estimate-num-keys, summed over states
  uint64_t state_keys = 0;        // ... over the user's states only
  uint64_t timers = 0;            // ... over the timer families (registered timers)
  uint64_t live_sst_bytes = 0;    // bytes of the SST files the current version references
  uint64_t sst_files = 0;         // number of those files
  uint64_t memtable_bytes = 0;    // active and immutable memtables, not yet flushed
  uint64_t table_reader_bytes = 0;  // index and filter blocks held outside the block cache
  uint64_t pinned_bytes = 0;      // blocks pinned in the shared block cache (all backends)
  uint64_t pending_compaction_bytes = 0;  // estimate of bytes compaction still has to rewrite
  uint64_t block_cache_bytes = 0;  // usage of the shared block cache (all backends, memtables too)
  uint64_t rows_read = 0;     // rows the state handles read since the instance opened
  uint64_t rows_written = 0;  // ... wrote (puts, merges, adds)
  uint64_t rows_deleted = 0;  // ... deleted (clears, puts of None)
};

// Reads RocksDB's properties of every column family. Safe beside reads and writes on other
// threads (properties are read under RocksDB's own locks).
rocksdb::Status CollectDbMetrics(StateDB* db, DbMetrics* out);

// The number of SST files in each level (L0 first), over all column families: the LSM's shape,
// which tests of where files land check.
std::vector<uint64_t> FilesPerLevel(StateDB* db);

}  // namespace stateengine
