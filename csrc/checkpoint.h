// Incremental checkpoint and rescaling primitives on a live StateDB.
// Invariant: a checkpoint directory is an openable RocksDB whose SST files are hard links of
// the live ones (immutable, so uploads can be deduplicated by file name); clipping and copying
// move whole key-group ranges, never partial key groups.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "db.h"

namespace stateengine {

// Flushes memtables (the WAL is off, so this is what makes recent writes durable) and hard
// links the live files into dir, which must not exist yet: tables and OPTIONS linked, the
// MANIFEST copied as it stood, CURRENT naming it; no log file (the WAL is off, it is empty).
rocksdb::Status CreateCheckpoint(StateDB* db, const std::string& dir);

// Deletes every key group outside [kg_start, kg_end] from all column families (DeleteRange).
rocksdb::Status ClipToKeyGroupRange(StateDB* db, int prefix_bytes, int32_t kg_start,
                                    int32_t kg_end, int32_t max_parallelism);

// Copies key groups [kg_start, kg_end] of src into dst; cf_map holds (src cf, dst cf) pairs.
rocksdb::Status CopyKeyGroupRange(StateDB* src, StateDB* dst,
                                  const std::vector<std::pair<int, int>>& cf_map,
                                  int prefix_bytes, int32_t kg_start, int32_t kg_end,
                                  uint64_t* entries);

}  // namespace stateengine
