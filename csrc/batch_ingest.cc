#include "batch_ingest.h"

#include <atomic>
#include <cstdio>
#include <vector>

#include <rocksdb/comparator.h>
#include <rocksdb/db.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>

#include "db.h"

namespace stateengine {

namespace {
std::atomic<size_t> g_ingest_min_keys{kDefaultBatchIngestMinKeys};
std::atomic<uint64_t> g_next_file{0};
}  // namespace

size_t SetBatchIngestMinKeys(size_t keys) { return g_ingest_min_keys.exchange(keys); }
size_t BatchIngestMinKeys() { return g_ingest_min_keys.load(std::memory_order_relaxed); }

namespace {

bool Overlaps(const std::vector<rocksdb::SstFileMetaData>& files, const rocksdb::Slice& smallest,
              const rocksdb::Slice& largest) {
  const rocksdb::Comparator* cmp = rocksdb::BytewiseComparator();
  for (const auto& f : files) {
    if (cmp->Compare(f.smallestkey, largest) <= 0 && cmp->Compare(smallest, f.largestkey) <= 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool IngestBatchPut(StateDB* db, int cf, size_t keys, const rocksdb::Slice& smallest,
                    const rocksdb::Slice& largest, bool* bottommost) {
  *bottommost = false;
  const size_t min_keys = BatchIngestMinKeys();
  if (min_keys == 0 || keys < min_keys) return false;
  // Only into an empty memtable: puts that join writes already in it are flushed with them
  // later, one flush for many puts, which a file per put costs more than (bench/run.py's
  // put_many loops without commits: 5 to 10% slower ingested).
  uint64_t active = 0, immutable = 0;
  rocksdb::ColumnFamilyHandle* h = db->handle(cf);
  if (!db->raw()->GetIntProperty(h, "rocksdb.num-entries-active-mem-table", &active) ||
      !db->raw()->GetIntProperty(h, "rocksdb.num-immutable-mem-table", &immutable) ||
      active != 0 || immutable != 0) {
    return false;
  }
  return IngestLandsInPlace(db, cf, smallest, largest, bottommost);
}

bool IngestLandsInPlace(StateDB* db, int cf, const rocksdb::Slice& smallest,
                        const rocksdb::Slice& largest, bool* bottommost) {
  *bottommost = false;
  uint64_t base_level = 1;
  rocksdb::ColumnFamilyHandle* h = db->handle(cf);
  if (!db->raw()->GetIntProperty(h, rocksdb::DB::Properties::kBaseLevel, &base_level)) {
    return false;
  }
  rocksdb::ColumnFamilyMetaData meta;
  db->raw()->GetColumnFamilyMetaData(h, &meta);
  if (meta.levels.empty() || meta.levels[0].level != 0) return false;
  if (meta.levels[0].files.size() >= kIngestMaxL0Files) return false;
  // RocksDB's choice of level, predicted from the tables' key ranges. RocksDB also looks at
  // the keys themselves and at running compactions, so now and then a file lands in another
  // level than predicted: the state read is the same, only the LSM's shape differs.
  int target = 0;
  for (const auto& level : meta.levels) {
    if (level.level > 0 && static_cast<uint64_t>(level.level) < base_level) continue;
    if (Overlaps(level.files, smallest, largest)) break;
    target = level.level;
  }
  for (const auto& level : meta.levels) {  // nothing between L0 and where it lands
    if (level.level > 0 && level.level < target && !level.files.empty()) return false;
  }
  *bottommost = target > 0 && target == static_cast<int>(meta.levels.size()) - 1;
  return true;
}

IngestedBatch::IngestedBatch(StateDB* db, int cf, bool bottommost)
    : db_(db), cf_(cf), bottommost_(bottommost) {}

IngestedBatch::~IngestedBatch() {
  writer_.reset();
  if (!path_.empty() && !moved_) std::remove(path_.c_str());
}

rocksdb::Status IngestedBatch::Open() {
  // The column family's own table options: in L0 with the Bloom filter lookups consult there,
  // in the last level as a compaction would write it there.
  // Compressed as a flush would: uncompressed files took ~0.03 us a key less to build but
  // were 2.3x the checkpoint bytes to upload (bench/scale_body.py at 20M rows).
  rocksdb::Options options = db_->SstFileOptions(cf_, bottommost_);
  path_ = db_->path() + "/batch-put-" + std::to_string(g_next_file.fetch_add(1)) + ".sst";
  // The page cache keeps what is written (SstFileWriter drops it every MiB by default, for
  // bulk loads read much later): the next batch reads this file at once, as it would a flush.
  writer_ = std::make_unique<rocksdb::SstFileWriter>(rocksdb::EnvOptions(), options,
                                                     db_->handle(cf_),
                                                     /*invalidate_page_cache=*/false);
  return writer_->Open(path_);
}

rocksdb::Status IngestedBatch::Finish() {
  rocksdb::Status st = writer_->Finish();
  if (!st.ok()) return st;
  writer_.reset();
  rocksdb::IngestExternalFileOptions io;
  io.move_files = true;
  io.allow_blocking_flush = true;
  // The sequence number lives in the MANIFEST only: the file's bytes stay as written, so its
  // checksums and a checkpoint's copy of it do not change after the fact.
  io.write_global_seqno = false;
  io.verify_checksums_before_ingest = false;  // just written by this process
  st = db_->raw()->IngestExternalFile(db_->handle(cf_), std::vector<std::string>{path_}, io);
  if (st.ok()) moved_ = true;
  return st;
}

}  // namespace stateengine
