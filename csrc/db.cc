#include "db.h"

#include <algorithm>
#include <atomic>

#include <rocksdb/filter_policy.h>
#include <rocksdb/listener.h>
#include <rocksdb/table.h>

#include "scratch_fs.h"
#include "status_guard.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace stateengine {
namespace {

constexpr size_t kDefaultBudget = 256ull << 20;
constexpr double kDefaultWriteBufferRatio = 0.5;
constexpr size_t kMinWriteBuffer = 2ull << 20;
// A memtable is a skiplist, and a put of a random key pays a cache miss per level it walks:
// the bigger the memtable, the slower every put. Capped at 16 MiB (Kafka Streams' default),
// scalar updates of random keys ran 1.3-1.5x faster than with the 29.5 MiB the default budget
// would give (bench state.valueUpdate.scalar); flushes just come more often.
constexpr size_t kMaxWriteBuffer = 16ull << 20;

// Flushes and compactions free their memtables and I/O buffers in bulk, and glibc keeps such
// memory in its per-thread arenas instead of returning it, so the process would stay larger
// than the budget accounts for. Trimming right after those events hands it back.
class TrimAfterBackgroundWork : public rocksdb::EventListener {
 public:
  void OnFlushCompleted(rocksdb::DB* /*db*/, const rocksdb::FlushJobInfo& /*info*/) override {
    Trim();
  }
  void OnCompactionCompleted(rocksdb::DB* /*db*/,
                             const rocksdb::CompactionJobInfo& /*info*/) override {
    Trim();
  }

 private:
  static void Trim() {
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
  }
};

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

void CreatedTables::OnTableFileCreated(const rocksdb::TableFileCreationInfo& info) {
  if (!info.status.ok()) return;  // a failed flush or compaction leaves no file behind
  std::lock_guard<std::mutex> lock(mu_);
  names_.insert(BaseName(info.file_path));
}

void CreatedTables::OnTableFileDeleted(const rocksdb::TableFileDeletionInfo& info) {
  std::lock_guard<std::mutex> lock(mu_);
  names_.erase(BaseName(info.file_path));
}

void CreatedTables::OnExternalFileIngested(rocksdb::DB* /*db*/,
                                           const rocksdb::ExternalFileIngestionInfo& info) {
  std::lock_guard<std::mutex> lock(mu_);
  names_.insert(BaseName(info.internal_file_path));
}

std::vector<std::string> CreatedTables::Names() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::vector<std::string>(names_.begin(), names_.end());
}

size_t MemoryBudget::ReservedFor(size_t bytes) {
  // 5/16, at most 20 MiB: a load of ten times a 64 MiB budget with compaction running
  // measured ~19 MiB of anonymous memory outside the cache's slabs (bench memory.*).
  return std::min(bytes / 16 * 5, size_t{20} << 20);
}

MemoryBudget::MemoryBudget() : bytes_(kDefaultBudget), write_buffer_ratio_(kDefaultWriteBufferRatio) {
  rocksdb::LRUCacheOptions opts;
  opts.capacity = bytes_ - ReservedFor(bytes_);
  opts.num_shard_bits = 4;
  opts.high_pri_pool_ratio = 0.1;  // index and filter blocks stay ahead of data blocks
  // Cache blocks live in their own slabs: freed blocks leave holes only other blocks use.
  allocator_ = std::make_shared<SlabBlockAllocator>();
  opts.memory_allocator = allocator_;
  cache_ = rocksdb::NewLRUCache(opts);
  // Memtable memory is charged to the cache, so cache + memtables share one bound.
  wbm_ = std::make_shared<rocksdb::WriteBufferManager>(
      static_cast<size_t>(opts.capacity * write_buffer_ratio_), cache_);
}

MemoryBudget& MemoryBudget::Instance() {
  static MemoryBudget* budget = new MemoryBudget();  // never destroyed: DBs may outlive statics
  return *budget;
}

void MemoryBudget::Configure(size_t bytes, double write_buffer_ratio) {
  std::lock_guard<std::mutex> lock(mu_);
  bytes_ = bytes;
  write_buffer_ratio_ = write_buffer_ratio;
  const size_t capacity = bytes - ReservedFor(bytes);
  cache_->SetCapacity(capacity);
  wbm_->SetBufferSize(static_cast<size_t>(capacity * write_buffer_ratio));
}

size_t MemoryBudget::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t MemoryBudget::cache_capacity() const { return cache_->GetCapacity(); }

double MemoryBudget::write_buffer_ratio() const {
  std::lock_guard<std::mutex> lock(mu_);
  return write_buffer_ratio_;
}

size_t MemoryBudget::CacheUsage() const { return cache_->GetUsage(); }
size_t MemoryBudget::MemtableUsage() const { return wbm_->memory_usage(); }
size_t MemoryBudget::CacheBlockBytes() const { return allocator_->live_bytes(); }
size_t MemoryBudget::CacheSlabsMapped() const { return allocator_->slabs_mapped(); }

rocksdb::DBOptions StateDB::MakeDBOptions() {
  rocksdb::DBOptions o;
  o.create_if_missing = true;
  o.create_missing_column_families = true;
  o.env = ScratchEnv();  // the working directory is scratch: no syncs (scratch_fs.h)
  o.write_buffer_manager = MemoryBudget::Instance().write_buffer_manager();
  o.max_background_jobs = 2;
  o.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  o.keep_log_file_num = 2;
  o.max_log_file_size = 1 << 20;
  o.stats_dump_period_sec = 0;
  o.stats_persist_period_sec = 0;
  // Durability comes from checkpoints: nothing in the local directory must survive a crash.
  o.avoid_flush_during_shutdown = true;
  // Every checkpoint copies (and uploads) the whole MANIFEST, to which each flush appends an
  // edit (~160 bytes a commit) and which RocksDB rolls only past this size (1 GiB by default):
  // 490 KB after 3,000 commits, tens of MB after months of micro-batches, in every version.
  // A rolled MANIFEST starts from a snapshot of the live files, so a checkpoint's copy stays
  // within about this size plus that snapshot.
  o.max_manifest_file_size = kMaxManifestBytes;
  static const auto trim = std::make_shared<TrimAfterBackgroundWork>();
  o.listeners.push_back(trim);
  return o;
}

namespace {
std::atomic<bool> g_bottommost_filters{false};
}  // namespace

void StateDB::SetBottommostFilters(bool on) { g_bottommost_filters.store(on); }
bool StateDB::bottommost_filters() { return g_bottommost_filters.load(); }

std::shared_ptr<TtlState> StateDB::NewTtlState(const ColumnFamilySpec& spec) const {
  if (spec.ttl == TtlLayout::kNone) return nullptr;
  return std::make_shared<TtlState>(spec.ttl, spec.numeric_codec, spec.merge == MergeKind::kNumeric,
                                    spec.numeric_op, clock_, spec.name);
}

rocksdb::ColumnFamilyOptions StateDB::MakeColumnFamilyOptions(const ColumnFamilySpec& spec,
                                                              const std::shared_ptr<TtlState>& ttl,
                                                              bool bottommost_files) const {
  rocksdb::ColumnFamilyOptions o;
  MemoryBudget& budget = MemoryBudget::Instance();
  o.optimize_filters_for_hits = !bottommost_filters();
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = budget.cache();
  // Files built for the bottommost level (restores) get no filter where lookups skip that
  // level's filters: building them was a tenth of a restore.
  if (!(bottommost_files && o.optimize_filters_for_hits)) {
    t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10, false));
  }
  t.cache_index_and_filter_blocks = true;
  t.cache_index_and_filter_blocks_with_high_priority = true;
  t.pin_l0_filter_and_index_blocks_in_cache = true;
  // Index and filter blocks stay in the cache (charged to the budget) but pinned, so a point
  // lookup does not pay a cache lookup and reference count for each of them.
  t.metadata_cache_options.top_level_index_pinning = rocksdb::PinningTier::kAll;
  t.metadata_cache_options.partition_pinning = rocksdb::PinningTier::kAll;
  t.metadata_cache_options.unpartitioned_pinning = rocksdb::PinningTier::kAll;
  // Point lookups hash into a data block instead of binary-searching its restart points.
  t.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  // A lookup whose bucket also holds a key of another restart interval falls back to binary
  // search: about 1 - e^-ratio of them, 39% at 0.5 against 53% at the default 0.75.
  t.data_block_hash_table_util_ratio = 0.5;
  // After the hash lookup, a point lookup scans its restart interval key by key: 4 keys
  // instead of RocksDB's 16 took 10% of the instructions off a cached Get (callgrind: 8.0k ->
  // 7.2k) for SST files ~6% larger (a restart point stores a whole key and 4 more bytes).
  t.block_restart_interval = 4;
  t.block_size = 16 * 1024;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  const size_t per_cf = static_cast<size_t>(budget.cache_capacity() * budget.write_buffer_ratio() / 4);
  o.write_buffer_size = std::clamp(per_cf, kMinWriteBuffer, kMaxWriteBuffer);
  o.max_write_buffer_number = 2;
  // Level sizes follow the data from the last level up (RocksDB's default from 8.4): L0
  // compacts straight into the level holding the state, the levels between stay empty, and an
  // ingested batch put lands in L0 over existing state or in the last level of an empty one
  // (batch_ingest.h). A state written without it keeps its tables in L1, which RocksDB then
  // treats as the base level.
  o.level_compaction_dynamic_level_bytes = true;
  // LZ4 compresses and decompresses faster than RocksDB's default snappy at a similar ratio;
  // every flush, compaction and restore pays for block compression.
  o.compression = rocksdb::kLZ4Compression;
  // No memtable_insert_with_hint_prefix_extractor. Measured with a hint for every key longer
  // than a key-group prefix (RocksDB 7.8 shares one hint table between a memtable's point and
  // range-deletion skiplists, so range tombstones must stay out of it): sorted batches of
  // distinct keys +18-32%, random scalar puts -8% (the hint is validated level by level before
  // it is given up), and scalar puts are what most state calls are. A sorted batch into an
  // empty memtable (a Spark task's, the commit having flushed the last) gains nothing: the
  // skiplist's own splice of the last insert already places each key in constant steps.
  switch (spec.merge) {
    case MergeKind::kList:
      o.merge_operator = NewListAppendOperator();
      break;
    case MergeKind::kNumeric:
      // With TTL a native add folds in C++ and puts (TtlMerge): the compaction filter may drop
      // an expired accumulator from an older file while an operand added when it still lived
      // sits in a newer file outside that compaction, and the sum would lose the accumulator.
      if (ttl == nullptr) o.merge_operator = NewNumericOperator(spec.numeric_op, spec.numeric_codec);
      break;
    case MergeKind::kNone:
      break;
  }
  if (ttl != nullptr) o.compaction_filter_factory = NewTtlCompactionFilterFactory(ttl);
  return o;
}

rocksdb::Status StateDB::Open(const std::string& path, const std::vector<ColumnFamilySpec>& cfs,
                              std::unique_ptr<StateDB>* out, bool create_if_missing) {
  if (cfs.size() > kMaxColumnFamilies) {
    return rocksdb::Status::InvalidArgument("more column families than a backend can hold");
  }
  std::unique_ptr<StateDB> s(new StateDB());
  s->path_ = path;
  s->write_options_.disableWAL = true;
  s->nowait_write_options_ = s->write_options_;
  s->nowait_write_options_.no_slowdown = true;
  s->nowait_read_options_.read_tier = rocksdb::kBlockCacheTier;
  std::vector<rocksdb::ColumnFamilyDescriptor> descs;
  std::vector<std::shared_ptr<TtlState>> ttls;
  descs.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
  for (const auto& spec : cfs) {
    ttls.push_back(s->NewTtlState(spec));
    descs.emplace_back(spec.name, s->MakeColumnFamilyOptions(spec, ttls.back()));
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DBOptions options = MakeDBOptions();
  options.listeners.push_back(s->created_);
  options.create_if_missing = create_if_missing;
  options.create_missing_column_families = create_if_missing;
  // Opening loads every table's reader on max_file_opening_threads threads, and RocksDB starts
  // all of them (per column family) however few tables there are: a new or small database,
  // opened for each micro-batch's partition, paid more for starting threads than for its files.
  std::vector<std::string> children;
  int tables = 0;
  if (options.env->GetChildren(path, &children).ok()) {
    for (const auto& name : children) {
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".sst") == 0) ++tables;
    }
  }
  options.max_file_opening_threads = std::clamp(tables, 1, options.max_file_opening_threads);
  rocksdb::Status st = rocksdb::DB::Open(options, path, descs, &handles, &s->db_);
  if (!st.ok()) return st;
  // handles[0] is RocksDB's default family, which no state uses; keep it only to close it.
  s->db_->DestroyColumnFamilyHandle(handles[0]);
  int index;
  for (size_t i = 0; i < cfs.size(); ++i) {
    if (!(st = s->Append(handles[i + 1], cfs[i], ttls[i], &index)).ok()) return st;
  }
  *out = std::move(s);
  return rocksdb::Status::OK();
}

StateDB::~StateDB() { Close(); }

rocksdb::Status StateDB::Close() {
  pins_->FreeAllAndClose();
  if (db_ == nullptr) return rocksdb::Status::OK();
  const size_t n = num_column_families();
  for (size_t i = 0; i < n; ++i) db_->DestroyColumnFamilyHandle(handle(static_cast<int>(i)));
  count_.store(0, std::memory_order_release);
  rocksdb::Status st = db_->Close();
  delete db_;
  db_ = nullptr;
  return st;
}

rocksdb::Status StateDB::Append(rocksdb::ColumnFamilyHandle* h, const ColumnFamilySpec& spec,
                                std::shared_ptr<TtlState> ttl, int* index) {
  std::lock_guard<std::mutex> lock(append_mu_);
  const size_t i = count_.load(std::memory_order_relaxed);
  if (i >= kMaxColumnFamilies) {
    db_->DestroyColumnFamilyHandle(h);
    return rocksdb::Status::InvalidArgument("a backend holds at most 65535 states");
  }
  auto& chunk = chunks_[i >> kChunkBits];
  if (!chunk) chunk.reset(new CfSlot[kChunkSize]);
  chunk[i & (kChunkSize - 1)].handle = h;
  chunk[i & (kChunkSize - 1)].ttl = std::move(ttl);
  chunk[i & (kChunkSize - 1)].spec = spec;
  count_.store(i + 1, std::memory_order_release);  // readers see the slot before the count
  *index = static_cast<int>(i);
  return rocksdb::Status::OK();
}

rocksdb::Status StateDB::CreateColumnFamily(const ColumnFamilySpec& spec, int* index) {
  rocksdb::ColumnFamilyHandle* h = nullptr;
  std::shared_ptr<TtlState> ttl = NewTtlState(spec);
  rocksdb::Status st = db_->CreateColumnFamily(MakeColumnFamilyOptions(spec, ttl), spec.name, &h);
  if (!st.ok()) return st;
  return Append(h, spec, std::move(ttl), index);
}

int StateDB::FindColumnFamily(const std::string& name) const {
  const size_t n = num_column_families();
  for (size_t i = 0; i < n; ++i) {
    if (spec(static_cast<int>(i)).name == name) return static_cast<int>(i);
  }
  return -1;
}

rocksdb::Status StateDB::Get(int cf, const rocksdb::Slice& key, rocksdb::PinnableSlice* value) {
  const CfSlot& s = Slot(cf);
  value->Reset();
  if (s.ttl != nullptr) return TtlGet(s, key, value, false);
  return db_->Get(read_options_, s.handle, key, value);
}

rocksdb::Status StateDB::Put(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value) {
  const CfSlot& s = Slot(cf);
  if (s.ttl != nullptr) return TtlPut(s, key, value, false);
  return db_->Put(write_options_, s.handle, key, value);
}

rocksdb::Status StateDB::Merge(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value) {
  const CfSlot& s = Slot(cf);
  if (s.ttl != nullptr) return TtlMerge(s, key, value, false);
  return db_->Merge(write_options_, s.handle, key, value);
}

rocksdb::Status StateDB::RawGet(int cf, const rocksdb::Slice& key, rocksdb::PinnableSlice* value) {
  value->Reset();
  return db_->Get(read_options_, handle(cf), key, value);
}

rocksdb::Status StateDB::RawPut(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value) {
  return db_->Put(write_options_, handle(cf), key, value);
}

rocksdb::Status StateDB::RawMerge(int cf, const rocksdb::Slice& key,
                                  const rocksdb::Slice& value) {
  return db_->Merge(write_options_, handle(cf), key, value);
}

rocksdb::Status StateDB::Delete(int cf, const rocksdb::Slice& key) {
  return db_->Delete(write_options_, handle(cf), key);
}

rocksdb::Status StateDB::DeleteRange(int cf, const rocksdb::Slice& begin,
                                     const rocksdb::Slice& end) {
  return db_->DeleteRange(write_options_, handle(cf), begin, end);
}

rocksdb::Status StateDB::GetNoWait(int cf, const rocksdb::Slice& key,
                                   rocksdb::PinnableSlice* value) {
  const CfSlot& s = Slot(cf);
  value->Reset();
  if (s.ttl != nullptr) return TtlGet(s, key, value, true);
  return db_->Get(nowait_read_options_, s.handle, key, value);
}

rocksdb::Status StateDB::PutNoWait(int cf, const rocksdb::Slice& key,
                                   const rocksdb::Slice& value) {
  const CfSlot& s = Slot(cf);
  if (s.ttl != nullptr) return TtlPut(s, key, value, true);
  return db_->Put(nowait_write_options_, s.handle, key, value);
}

rocksdb::Status StateDB::MergeNoWait(int cf, const rocksdb::Slice& key,
                                     const rocksdb::Slice& value) {
  const CfSlot& s = Slot(cf);
  if (s.ttl != nullptr) return TtlMerge(s, key, value, true);
  return db_->Merge(nowait_write_options_, s.handle, key, value);
}

// ---- state with TTL ---------------------------------------------------------------------

rocksdb::Status StateDB::ConfigureTtl(int cf, int64_t ttl_ms, bool update_on_read,
                                      bool return_expired, const std::string& row_program,
                                      const std::string& row_versions) {
  const std::shared_ptr<TtlState>& t = ttl(cf);
  if (t == nullptr) {
    return rocksdb::Status::InvalidArgument("state '" + spec(cf).name + "' was created without TTL");
  }
  if (ttl_ms <= 0) return rocksdb::Status::InvalidArgument("a TTL must be positive");
  return t->Configure(ttl_ms, update_on_read, return_expired, row_program, row_versions);
}

rocksdb::Status StateDB::TtlGet(const CfSlot& s, const rocksdb::Slice& key,
                                rocksdb::PinnableSlice* value, bool nowait) {
  int64_t now;
  rocksdb::Status st = s.ttl->AccessTime(&now);
  if (!st.ok()) return st;
  st = db_->Get(nowait ? nowait_read_options_ : read_options_, s.handle, key, value);
  if (!st.ok()) return st;
  return GuardStatus("reading a state with TTL", [&]() -> rocksdb::Status {
    const bool value_layout = s.ttl->layout() == TtlLayout::kValue;
    TtlVerdict verdict;
    std::string plain, rewrite;
    rocksdb::Status rs =
        s.ttl->Read(*value, now, true, &verdict, value_layout ? nullptr : &plain, &rewrite);
    if (!rs.ok()) return rs;
    const rocksdb::WriteOptions& wo = nowait ? nowait_write_options_ : write_options_;
    if (verdict.write_back == TtlWriteBack::kDelete) {
      rs = db_->Delete(wo, s.handle, key);
    } else if (verdict.write_back == TtlWriteBack::kRewrite) {
      rs = db_->Put(wo, s.handle, key, rewrite);
    }
    if (!rs.ok() || !verdict.visible) {  // Incomplete: the caller repeats the whole read
      value->Reset();
      return rs.ok() ? rocksdb::Status::NotFound() : rs;
    }
    if (value_layout) {
      value->remove_prefix(kTtlStampBytes);  // no copy: the plain value follows the stamp
    } else {
      value->Reset();
      value->GetSelf()->swap(plain);
      value->PinSelf();
    }
    return rocksdb::Status::OK();
  });
}

rocksdb::Status StateDB::TtlPut(const CfSlot& s, const rocksdb::Slice& key,
                                const rocksdb::Slice& value, bool nowait) {
  int64_t now;
  rocksdb::Status st = s.ttl->AccessTime(&now);
  if (!st.ok()) return st;
  const rocksdb::WriteOptions& wo = nowait ? nowait_write_options_ : write_options_;
  return GuardStatus("writing a state with TTL", [&]() -> rocksdb::Status {
    if (s.ttl->layout() == TtlLayout::kList) {
      std::string stamped;
      rocksdb::Status ss = s.ttl->Stamp(value, now, &stamped);
      return ss.ok() ? db_->Put(wo, s.handle, key, stamped) : ss;
    }
    // Values and map values: the stamp goes in as a slice of its own, so nothing is copied
    // beyond what DB::Put itself copies into its write batch.
    char stamp[kTtlStampBytes];
    StoreBE64(stamp, static_cast<uint64_t>(now));
    rocksdb::Slice parts[3];
    int n = 0;
    if (s.ttl->layout() == TtlLayout::kMap) {
      if (value.empty()) return rocksdb::Status::InvalidArgument("a map value without its null flag");
      parts[n++] = rocksdb::Slice(value.data(), 1);
      parts[n++] = rocksdb::Slice(stamp, kTtlStampBytes);
      parts[n++] = rocksdb::Slice(value.data() + 1, value.size() - 1);
    } else {
      parts[n++] = rocksdb::Slice(stamp, kTtlStampBytes);
      parts[n++] = value;
    }
    rocksdb::WriteBatch batch(key.size() + value.size() + kTtlStampBytes + 24);
    rocksdb::Status ps = batch.Put(s.handle, rocksdb::SliceParts(&key, 1), rocksdb::SliceParts(parts, n));
    return ps.ok() ? db_->Write(wo, &batch) : ps;
  });
}

rocksdb::Status StateDB::TtlMerge(const CfSlot& s, const rocksdb::Slice& key,
                                  const rocksdb::Slice& operand, bool nowait) {
  int64_t now;
  rocksdb::Status st = s.ttl->AccessTime(&now);
  if (!st.ok()) return st;
  const rocksdb::WriteOptions& wo = nowait ? nowait_write_options_ : write_options_;
  return GuardStatus("merging into a state with TTL", [&]() -> rocksdb::Status {
    std::string out;
    if (s.ttl->layout() == TtlLayout::kList) {  // an append: every element gets its stamp
      rocksdb::Status ss = s.ttl->Stamp(operand, now, &out);
      return ss.ok() ? db_->Merge(wo, s.handle, key, out) : ss;
    }
    if (!s.ttl->numeric()) {
      return rocksdb::Status::InvalidArgument("state '" + s.spec.name + "' takes no merges");
    }
    // A native add: read, fold, put, under the state's lock so that adds of other threads to
    // the same key are not lost. Without waiting, a busy lock is Incomplete like a busy write.
    std::unique_lock<std::mutex> lock(s.ttl->fold_mutex(), std::defer_lock);
    if (nowait) {
      if (!lock.try_lock()) return rocksdb::Status::Incomplete("another thread is adding");
    } else {
      lock.lock();
    }
    rocksdb::PinnableSlice current;
    rocksdb::Status gs =
        db_->Get(nowait ? nowait_read_options_ : read_options_, s.handle, key, &current);
    if (!gs.ok() && !gs.IsNotFound()) return gs;
    rocksdb::Status fs = s.ttl->Fold(gs.ok() ? &current : nullptr, operand, now, &out);
    return fs.ok() ? db_->Put(wo, s.handle, key, out) : fs;
  });
}

rocksdb::Status StateDB::DeleteNoWait(int cf, const rocksdb::Slice& key) {
  return db_->Delete(nowait_write_options_, handle(cf), key);
}

rocksdb::Status StateDB::Write(rocksdb::WriteBatch* batch) {
  return db_->Write(write_options_, batch);
}

rocksdb::Status StateDB::PutMany(int cf, const std::vector<std::string>& keys,
                                 const std::vector<std::string>& values) {
  const CfSlot& s = Slot(cf);
  int64_t now = 0;
  if (s.ttl != nullptr) {
    rocksdb::Status st = s.ttl->AccessTime(&now);
    if (!st.ok()) return st;
  }
  return GuardStatus("writing a batch", [&]() -> rocksdb::Status {
    rocksdb::WriteBatch batch;
    std::string stamped;
    for (size_t i = 0; i < keys.size(); ++i) {
      rocksdb::Status st;
      if (s.ttl != nullptr) {
        if (!(st = s.ttl->Stamp(values[i], now, &stamped)).ok()) return st;
        st = batch.Put(s.handle, keys[i], stamped);
      } else {
        st = batch.Put(s.handle, keys[i], values[i]);
      }
      if (!st.ok()) return st;
    }
    rocksdb::Status st = db_->Write(write_options_, &batch);
    if (st.ok()) CountWrites(keys.size());
    return st;
  });
}

rocksdb::Status StateDB::DeletePrefix(int cf, const std::string& prefix) {
  return GuardStatus("clearing a map", [&]() -> rocksdb::Status {
    const std::string upper = PrefixSuccessor(prefix);
    rocksdb::ReadOptions ro;
    rocksdb::Slice lower_slice(prefix), upper_slice(upper);
    ro.iterate_lower_bound = &lower_slice;
    if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, handle(cf)));
    rocksdb::WriteBatch batch;
    for (it->Seek(lower_slice); it->Valid(); it->Next()) {
      rocksdb::Status st = batch.Delete(handle(cf), it->key());
      if (!st.ok()) return st;
    }
    if (!it->status().ok()) return it->status();
    if (batch.Count() == 0) return rocksdb::Status::OK();
    rocksdb::Status st = db_->Write(write_options_, &batch);
    if (st.ok()) CountDeletes(batch.Count());
    return st;
  });
}

rocksdb::Status StateDB::Scan(int cf, const std::string& lower, const std::string& upper,
                              size_t limit, bool reverse, std::vector<KeyValue>* out) {
  return GuardStatus("scanning", [&]() -> rocksdb::Status {
    rocksdb::ReadOptions ro;
    rocksdb::Slice lower_slice(lower), upper_slice(upper);
    ro.iterate_lower_bound = &lower_slice;
    if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
    ro.fill_cache = false;  // scans must not evict the working set of point lookups
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, handle(cf)));
    if (reverse) {
      it->SeekToLast();
    } else {
      it->Seek(lower_slice);
    }
    for (; it->Valid() && (limit == 0 || out->size() < limit); reverse ? it->Prev() : it->Next()) {
      out->push_back({it->key().ToString(), it->value().ToString()});
    }
    return it->status();
  });
}

rocksdb::Status StateDB::Count(int cf, const std::string& lower, const std::string& upper,
                               uint64_t* count) {
  rocksdb::ReadOptions ro;
  rocksdb::Slice lower_slice(lower), upper_slice(upper);
  ro.iterate_lower_bound = &lower_slice;
  if (!upper.empty()) ro.iterate_upper_bound = &upper_slice;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, handle(cf)));
  uint64_t n = 0;
  for (it->Seek(lower_slice); it->Valid(); it->Next()) ++n;
  *count = n;
  return it->status();
}

rocksdb::Status StateDB::Flush() {
  rocksdb::FlushOptions fo;
  fo.wait = true;
  std::vector<rocksdb::ColumnFamilyHandle*> live;
  for (size_t i = 0; i < num_column_families(); ++i) live.push_back(handle(static_cast<int>(i)));
  return db_->Flush(fo, live);
}

rocksdb::Status StateDB::CompactAll(int target_level) {
  rocksdb::CompactRangeOptions co;
  if (target_level >= 0) {
    co.change_level = true;
    co.target_level = target_level;
  }
  for (size_t i = 0; i < num_column_families(); ++i) {
    rocksdb::Status st = db_->CompactRange(co, handle(static_cast<int>(i)), nullptr, nullptr);
    if (!st.ok()) return st;
  }
  return rocksdb::Status::OK();
}

ColumnFamilySpec MakeColumnFamilySpec(const std::string& name, int merge_kind, int numeric_op,
                                      int numeric_codec, int ttl_layout) {
  ColumnFamilySpec spec;
  spec.name = name;
  spec.merge = static_cast<MergeKind>(merge_kind);
  spec.numeric_op = static_cast<NumericOp>(numeric_op);
  spec.numeric_codec = static_cast<Codec>(numeric_codec);
  spec.ttl = static_cast<TtlLayout>(ttl_layout);
  return spec;
}

rocksdb::Options StateDB::SstFileOptions(int cf, bool bottommost) const {
  return rocksdb::Options(MakeDBOptions(), MakeColumnFamilyOptions(spec(cf), ttl(cf), bottommost));
}

uint64_t StateDB::EstimateNumKeys() const {
  uint64_t total = 0;
  for (size_t i = 0; i < num_column_families(); ++i) {
    uint64_t n = 0;
    if (db_->GetIntProperty(handle(static_cast<int>(i)), "rocksdb.estimate-num-keys", &n)) {
      total += n;
    }
  }
  return total;
}

bool PinRegistry::Add(DbPin* pin) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return false;
  pins_.insert(pin);
  return true;
}

void PinRegistry::Remove(DbPin* pin) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pins_.erase(pin) != 0) pin->FreePinned();
}

void PinRegistry::CancelAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (DbPin* pin : pins_) pin->Cancel();
}

void PinRegistry::FreeAllAndClose() {
  std::lock_guard<std::mutex> lock(mu_);
  for (DbPin* pin : pins_) pin->FreePinned();
  pins_.clear();
  closed_ = true;
}

void DbPin::PinTo(StateDB* db) {
  registry_ = db->pins();
  if (!registry_->Add(this)) FreePinned();
}

void DbPin::Unpin() {
  if (registry_) registry_->Remove(this);
}

std::string PrefixSuccessor(const std::string& prefix) {
  std::string s = prefix;
  while (!s.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(s.back());
    if (last != 0xFF) {
      ++last;
      return s;
    }
    s.pop_back();
  }
  return s;
}

}  // namespace stateengine
