// Large batch puts written as a table file and ingested, instead of a WriteBatch through the
// memtable. A batch's distinct keys are already sorted (KeyBatch), which is all a table file
// needs; the memtable route pays twice for the same bytes: a skiplist insert per key now and
// a flush building the same table at the commit (at 2M keys a batch, each ~0.22 us a key).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <rocksdb/slice.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/status.h>

namespace stateengine {

class StateDB;

// Batch puts of at least this many distinct keys are ingested (0: never). Below it the fixed
// cost of a file and a MANIFEST edit outweighs the memtable's per-key cost: even with the
// memtable at ~1k keys a batch, ahead from ~4k (bench/scale_body.py --ingest-min-keys;
// docs/performance/scale.md, fourth round). Process-wide; returns the old value
// (stateengine.configure_batch_ingest, whose default is this constant).
constexpr size_t kDefaultBatchIngestMinKeys = 4096;
size_t SetBatchIngestMinKeys(size_t keys);
size_t BatchIngestMinKeys();

// Whether a put of `keys` distinct keys from `smallest` to `largest` into column family cf is
// ingested: large enough, the first write since the memtable was last flushed (a Spark task's
// put between its reads and its commit; puts joining other writes share their later flush),
// and landing where a flush's table or a compaction's output would. RocksDB places an ingested
// file in the deepest level it fits above the first level whose tables it overlaps, skipping
// the levels between L0 and the base level that dynamic level sizing keeps empty (db.cc turns
// it on). So with all data in the base level a file lands in L0, where L0 compaction treats it
// as a flush's table, and into an empty state it lands in the bottommost level, where a
// compaction would put it. Elsewhere it could land in a level that holds nothing else while
// data lies in a shallower one (a state written before dynamic level sizing, whose tables
// stay in L1): files would stack up one per level (L6, L5, L4...), where no compaction merges
// them (each level far below its target size) and every later read consults each (scalar
// reads of a 4M-key state written in four such batches took 40% more CPU than after four
// flushes). Such a put goes through the memtable. Past kIngestMaxL0Files the memtable also
// takes the puts, so many mid-sized puts within one commit cannot pile files up faster than
// compaction merges them.
// *bottommost says whether the file is predicted to land in the last level (its table options
// then are a bottommost file's: StateDB::SstFileOptions).
constexpr size_t kIngestMaxL0Files = 12;
bool IngestBatchPut(StateDB* db, int cf, size_t keys, const rocksdb::Slice& smallest,
                    const rocksdb::Slice& largest, bool* bottommost);

// The landing half of IngestBatchPut, for any file of keys in [smallest, largest]: whether a
// file ingested now lands where a flush's or a compaction's table would (not below a level
// holding tables, L0 not crowded), and whether that is the last level.
bool IngestLandsInPlace(StateDB* db, int cf, const rocksdb::Slice& smallest,
                        const rocksdb::Slice& largest, bool* bottommost);

// One table file of puts and deletes in strictly increasing key order, ingested into a column
// family with a sequence number above every write before it (so it wins over them, as a
// WriteBatch written now would). The file lives in the database's directory (ingestion moves
// it by a hard link) and is removed if it is never ingested.
class IngestedBatch {
 public:
  IngestedBatch(StateDB* db, int cf, bool bottommost);
  ~IngestedBatch();
  IngestedBatch(const IngestedBatch&) = delete;
  IngestedBatch& operator=(const IngestedBatch&) = delete;

  rocksdb::Status Open();
  rocksdb::Status Put(const rocksdb::Slice& key, const rocksdb::Slice& value) {
    return writer_->Put(key, value);
  }
  rocksdb::Status Delete(const rocksdb::Slice& key) { return writer_->Delete(key); }
  // Finishes the file and ingests it (flushing the column family's memtable first if it holds
  // any of the file's keys).
  rocksdb::Status Finish();

 private:
  StateDB* db_;
  int cf_;
  bool bottommost_;
  std::string path_;
  std::unique_ptr<rocksdb::SstFileWriter> writer_;
  bool moved_ = false;
};

}  // namespace stateengine
