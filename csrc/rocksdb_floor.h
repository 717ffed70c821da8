// The bare RocksDB cost of a batch's keys: the benchmarks' yardstick for what the state API
// adds on top of RocksDB and for how much batching can gain at most. Nothing here encodes,
// decodes or touches Python; the keys come ready-built from a KeyBatch.
#pragma once

#include <rocksdb/status.h>

#include "batch_ops.h"
#include "db.h"

namespace stateengine {

enum FloorOp : int {
  kFloorPointGet = 0,    // one Get per row, in input order: a scalar loop without Python
  kFloorMultiGet = 1,    // one sorted MultiGet over the distinct keys, as BatchGet does for sparse batches
  kFloorPointPut = 2,    // one Put per row, in input order
  kFloorWriteBatch = 3,  // one sorted WriteBatch of puts, as BatchPut does
};

// Runs op over batch's keys and returns the seconds it took in *seconds. Puts write back the
// values the keys hold (read before the clock starts), so the state is unchanged afterwards;
// keys without a value are skipped.
rocksdb::Status MeasureFloor(StateDB* db, int cf, const KeyBatch& batch, int op,
                             double* seconds);

}  // namespace stateengine
