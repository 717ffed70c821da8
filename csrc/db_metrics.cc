#include "db_metrics.h"

#include <string>
#include <vector>

namespace stateengine {

namespace {

uint64_t SumProperty(StateDB* db, const char* name) {
  uint64_t total = 0;
  for (size_t i = 0; i < db->num_column_families(); ++i) {
    uint64_t n = 0;
    if (db->raw()->GetIntProperty(db->handle(static_cast<int>(i)), name, &n)) total += n;
  }
  return total;
}

// Timers live in internal column families (stateengine/timers.py names them).
bool IsTimerFamily(const std::string& name) { return name.rfind("__timers_", 0) == 0; }

}  // namespace

rocksdb::Status CollectDbMetrics(StateDB* db, DbMetrics* out) {
  *out = DbMetrics();
  for (size_t i = 0; i < db->num_column_families(); ++i) {
    uint64_t n = 0;
    const int cf = static_cast<int>(i);
    if (!db->raw()->GetIntProperty(db->handle(cf), "rocksdb.estimate-num-keys", &n)) continue;
    out->estimated_keys += n;
    (IsTimerFamily(db->spec(cf).name) ? out->timers : out->state_keys) += n;
  }
  out->live_sst_bytes = SumProperty(db, "rocksdb.live-sst-files-size");
  out->memtable_bytes = SumProperty(db, "rocksdb.cur-size-all-mem-tables");
  out->table_reader_bytes = SumProperty(db, "rocksdb.estimate-table-readers-mem");
  out->pending_compaction_bytes = SumProperty(db, "rocksdb.estimate-pending-compaction-bytes");
  // The block cache is shared by every backend of the process: one reading, not a sum.
  uint64_t pinned = 0;
  if (db->raw()->GetIntProperty(db->raw()->DefaultColumnFamily(),
                                "rocksdb.block-cache-pinned-usage", &pinned)) {
    out->pinned_bytes = pinned;
  }
  out->block_cache_bytes = MemoryBudget::Instance().CacheUsage();
  out->rows_read = db->rows_read();
  out->rows_written = db->rows_written();
  out->rows_deleted = db->rows_deleted();
  std::vector<rocksdb::LiveFileMetaData> files;
  db->raw()->GetLiveFilesMetaData(&files);
  out->sst_files = files.size();
  return rocksdb::Status::OK();
}

std::vector<uint64_t> FilesPerLevel(StateDB* db) {
  std::vector<rocksdb::LiveFileMetaData> files;
  db->raw()->GetLiveFilesMetaData(&files);
  std::vector<uint64_t> out;
  for (const auto& f : files) {
    if (f.level < 0) continue;
    if (out.size() <= static_cast<size_t>(f.level)) out.resize(f.level + 1, 0);
    ++out[f.level];
  }
  return out;
}

}  // namespace stateengine
