// The local working directory of a backend is scratch: nothing in it has to survive a crash,
// because a backend that stopped is always rebuilt from checkpoint storage into an empty
// directory (and the write-ahead log is off anyway). So RocksDB's file and directory syncs
// there (after every flush, compaction, restore-built SST file and ingestion) are skipped: on
// virtual disks a sync costs a cache flush per megabyte written. Files that must be durable,
// checkpoint and snapshot files, are written and synced outside RocksDB (file_io.h, storage.py).
#pragma once

#include <rocksdb/env.h>

namespace stateengine {

// The process-wide Env of every StateDB: the default Env with syncs turned into no-ops.
rocksdb::Env* ScratchEnv();

}  // namespace stateengine
