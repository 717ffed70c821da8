// One RocksDB instance per backend with one column family per registered state.
// Invariant: every instance in the process draws block cache and memtables from the single
// MemoryBudget, so their sum stays bounded by it; the write-ahead log is always off because
// durability comes from checkpoints, never from the local directory. Column family handles
// never move once created (calls on other threads index them while a state registers), and
// Close frees every iterator and snapshot still pinned to the instance before RocksDB closes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/write_batch.h>
#include <rocksdb/write_buffer_manager.h>

#include "block_allocator.h"
#include "codec.h"
#include "merge_operators.h"
#include "ttl.h"

namespace stateengine {

// The budget bounds all of RocksDB's memory, not just the cache: RocksDB also uses memory
// outside it (table readers, flush/compaction I/O buffers, iterators), so a share of the budget
// is reserved for that (as Flink sizes its block cache below managed memory) and the block
// cache, which memtables are charged to, gets the rest.
class MemoryBudget {
 public:
  static MemoryBudget& Instance();
  // Resizes the shared cache and write-buffer limit; open instances follow immediately.
  void Configure(size_t bytes, double write_buffer_ratio);
  // Part of a budget kept for RocksDB's memory outside the block cache.
  static size_t ReservedFor(size_t bytes);
  size_t bytes() const;
  size_t cache_capacity() const;
  double write_buffer_ratio() const;
  size_t CacheUsage() const;
  size_t MemtableUsage() const;
  // Resident bytes of cached blocks (their slab slots); compare with CacheUsage().
  size_t CacheBlockBytes() const;
  size_t CacheSlabsMapped() const;
  std::shared_ptr<rocksdb::Cache> cache() const { return cache_; }
  std::shared_ptr<rocksdb::WriteBufferManager> write_buffer_manager() const { return wbm_; }

 private:
  MemoryBudget();
  mutable std::mutex mu_;
  size_t bytes_;
  double write_buffer_ratio_;
  std::shared_ptr<rocksdb::Cache> cache_;
  std::shared_ptr<rocksdb::WriteBufferManager> wbm_;
  std::shared_ptr<SlabBlockAllocator> allocator_;
};

enum class MergeKind : uint8_t { kNone = 0, kList = 1, kNumeric = 2 };

struct ColumnFamilySpec {
  std::string name;
  MergeKind merge = MergeKind::kNone;
  NumericOp numeric_op = NumericOp::kSum;
  Codec numeric_codec = kAny;  // the state's value codec
  TtlLayout ttl = TtlLayout::kNone;  // where a state with TTL keeps its timestamps (ttl.h)
};

// Built from plain integers so the Cython layer never has to name the enum classes.
ColumnFamilySpec MakeColumnFamilySpec(const std::string& name, int merge_kind, int numeric_op,
                                      int numeric_codec, int ttl_layout = 0);

struct KeyValue {
  std::string key;
  std::string value;
};

class PinRegistry;

// Something that holds RocksDB iterators or a snapshot of a StateDB between calls (scan
// cursors, full snapshots). RocksDB must not close under them, so StateDB::Close first frees
// every registered pin. Freeing happens once, under the registry's lock, by whoever comes
// first: the owner (Unpin, also from its destructor) or Close; the registry outlives the
// StateDB as long as a pin refers to it, so the order of destruction does not matter.
class DbPin {
 public:
  DbPin(const DbPin&) = delete;
  DbPin& operator=(const DbPin&) = delete;
  // Asks a long-running user of the pin to stop early (a snapshot being written).
  virtual void Cancel() {}

 protected:
  DbPin() = default;
  ~DbPin() = default;  // derived destructors call Unpin() first
  // Registers the pin; frees it at once if the instance is closed already.
  void PinTo(class StateDB* db);
  // Frees what the pin holds (if Close has not) and unregisters it.
  void Unpin();
  // Drops the iterators/snapshots; runs at most once, with the registry locked.
  virtual void FreePinned() = 0;

 private:
  friend class PinRegistry;
  std::shared_ptr<PinRegistry> registry_;
};

class PinRegistry {
 public:
  // False (and nothing registered) once the instance closed.
  bool Add(DbPin* pin);
  void Remove(DbPin* pin);
  void CancelAll();
  // Frees every pin and refuses new ones: the instance is about to close.
  void FreeAllAndClose();

 private:
  std::mutex mu_;
  std::unordered_set<DbPin*> pins_;
  bool closed_ = false;
};

// The table (SST) files this database's own RocksDB wrote (flushes, compactions) and that
// are still live: the files a restore hard-linked in from a checkpoint are not among them.
// Restores elsewhere on this machine trust these without reading them (checkpoint/untrusted.py).
class CreatedTables : public rocksdb::EventListener {
 public:
  void OnTableFileCreated(const rocksdb::TableFileCreationInfo& info) override;
  void OnTableFileDeleted(const rocksdb::TableFileDeletionInfo& info) override;
  // Tables this library wrote and ingested (restores of full snapshots) are its own too.
  void OnExternalFileIngested(rocksdb::DB* db, const rocksdb::ExternalFileIngestionInfo& info) override;
  std::vector<std::string> Names() const;

 private:
  mutable std::mutex mu_;
  std::unordered_set<std::string> names_;  // base names, e.g. 000012.sst
};

// RocksDB rolls a database's MANIFEST past this size (StateDB::MakeDBOptions).
constexpr uint64_t kMaxManifestBytes = 64 << 10;

class StateDB {
 public:
  // Opens the database at path with exactly the given column families; creates what is
  // missing only with create_if_missing (a restored directory must hold them all already).
  static rocksdb::Status Open(const std::string& path, const std::vector<ColumnFamilySpec>& cfs,
                              std::unique_ptr<StateDB>* out, bool create_if_missing = true);
  // Whether column families opened from now on build Bloom filters for their bottommost level
  // too. Off by default: most lookups of keyed state find their key, which lives in the last
  // level, so the filter probe (a cache miss per lookup) is wasted there; misses are still
  // filtered out in every level above. Miss-heavy states (deduplication) turn it on.
  static void SetBottommostFilters(bool on);
  static bool bottommost_filters();
  ~StateDB();
  StateDB(const StateDB&) = delete;
  StateDB& operator=(const StateDB&) = delete;

  // Frees every pinned iterator and snapshot, then closes RocksDB. The bindings call it only
  // once no other thread is inside a call on this instance.
  rocksdb::Status Close();
  // Asks pinned long-running work (snapshots being written) to stop.
  void CancelPinned() { pins_->CancelAll(); }
  const std::shared_ptr<PinRegistry>& pins() const { return pins_; }
  rocksdb::Status CreateColumnFamily(const ColumnFamilySpec& spec, int* index);
  int FindColumnFamily(const std::string& name) const;
  size_t num_column_families() const { return count_.load(std::memory_order_acquire); }
  const ColumnFamilySpec& spec(int index) const { return Slot(index).spec; }
  rocksdb::ColumnFamilyHandle* handle(int index) const { return Slot(index).handle; }
  rocksdb::DB* raw() const { return db_; }
  const std::string& path() const { return path_; }

  // State accesses. In a column family with TTL (ttl.h) values arrive and leave as the
  // bindings encode them: writes stamp them with the TTL time, reads check and strip the
  // stamps (expired entries read as NotFound under NeverReturnExpired), clean up what they
  // find expired and, under OnReadAndWrite, store what they return with the time of the read.
  // Native numeric merges of such a family fold in C++ under a lock (read, combine, put).
  // Other families take these calls straight to RocksDB.
  rocksdb::Status Get(int cf, const rocksdb::Slice& key, rocksdb::PinnableSlice* value);
  rocksdb::Status Put(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value);
  rocksdb::Status Merge(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value);
  rocksdb::Status Delete(int cf, const rocksdb::Slice& key);
  rocksdb::Status DeleteRange(int cf, const rocksdb::Slice& begin, const rocksdb::Slice& end);
  // Variants that never wait: Status::Incomplete (and nothing done) instead of a read that
  // needs file I/O or a write that would stall. The bindings call these with the GIL held and
  // repeat the blocking call with the GIL released only on Incomplete, because releasing and
  // retaking the GIL costs more than a memtable or block-cache hit.
  rocksdb::Status GetNoWait(int cf, const rocksdb::Slice& key, rocksdb::PinnableSlice* value);
  rocksdb::Status PutNoWait(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value);
  rocksdb::Status MergeNoWait(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value);
  rocksdb::Status DeleteNoWait(int cf, const rocksdb::Slice& key);
  // Stored bytes as they are, timestamps included (tools, restores, raw namespace merges).
  rocksdb::Status RawGet(int cf, const rocksdb::Slice& key, rocksdb::PinnableSlice* value);
  rocksdb::Status RawPut(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value);
  rocksdb::Status RawMerge(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value);
  rocksdb::Status Write(rocksdb::WriteBatch* batch);
  // The TTL settings of a state's registered descriptor (InvalidArgument for a family without
  // TTL), and the time every TTL check and stamp uses from now on.
  rocksdb::Status ConfigureTtl(int cf, int64_t ttl_ms, bool update_on_read, bool return_expired,
                               const std::string& row_program = std::string(),
                               const std::string& row_versions = std::string());
  void SetTtlTime(int64_t ms) { clock_->Set(ms); }
  int64_t ttl_time() const { return clock_->now(); }
  // The TTL of a column family; null for a family without TTL.
  const std::shared_ptr<TtlState>& ttl(int cf) const { return Slot(cf).ttl; }
  // One atomic write batch of puts (keys[i] -> values[i]; stamped in a family with TTL).
  rocksdb::Status PutMany(int cf, const std::vector<std::string>& keys,
                          const std::vector<std::string>& values);
  // Deletes every key starting with prefix, one point delete each: range tombstones would
  // outlive the entries and slow every later read of the column family.
  rocksdb::Status DeletePrefix(int cf, const std::string& prefix);
  // Up to limit entries with lower <= key < upper (an empty upper means unbounded), in key
  // order or, if reverse, from the largest key down. A limit of 0 means no limit.
  rocksdb::Status Scan(int cf, const std::string& lower, const std::string& upper, size_t limit,
                       bool reverse, std::vector<KeyValue>* out);
  // Number of entries with lower <= key < upper.
  rocksdb::Status Count(int cf, const std::string& lower, const std::string& upper,
                        uint64_t* count);
  rocksdb::Status Flush();
  // Every column family compacted; target_level >= 0 moves the result to that level (tests
  // build the shape of states written before dynamic level sizing with it).
  rocksdb::Status CompactAll(int target_level = -1);
  // RocksDB's estimate of live keys over all column families (no scan).
  uint64_t EstimateNumKeys() const;
  // Base names of the live table files this instance's RocksDB wrote itself.
  std::vector<std::string> CreatedTableFiles() const { return created_->Names(); }
  // Rows the state handles read, wrote and deleted since the instance opened (one per element
  // of a batch call). The handles count, not Get/Put: timers, restores and raw access go
  // through the same calls and are not state rows. Relaxed: a count, not a synchronisation.
  void CountReads(uint64_t n) { rows_read_.fetch_add(n, std::memory_order_relaxed); }
  void CountWrites(uint64_t n) { rows_written_.fetch_add(n, std::memory_order_relaxed); }
  void CountDeletes(uint64_t n) { rows_deleted_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t rows_read() const { return rows_read_.load(std::memory_order_relaxed); }
  uint64_t rows_written() const { return rows_written_.load(std::memory_order_relaxed); }
  uint64_t rows_deleted() const { return rows_deleted_.load(std::memory_order_relaxed); }
  const rocksdb::WriteOptions& write_options() const { return write_options_; }
  // Options for writing SST files that this column family ingests: into its bottommost level
  // (restores into an empty column family), or not (large batch puts: with a Bloom filter).
  rocksdb::Options SstFileOptions(int cf, bool bottommost = true) const;

 private:
  StateDB() = default;
  rocksdb::ColumnFamilyOptions MakeColumnFamilyOptions(const ColumnFamilySpec& spec,
                                                       const std::shared_ptr<TtlState>& ttl,
                                                       bool bottommost_files = false) const;
  std::shared_ptr<TtlState> NewTtlState(const ColumnFamilySpec& spec) const;
  static rocksdb::DBOptions MakeDBOptions();

  // Column families live in fixed chunks that never move: another thread may index a handle
  // (without a lock, on every call) while a new state's family is appended.
  struct CfSlot {
    rocksdb::ColumnFamilyHandle* handle = nullptr;
    std::shared_ptr<TtlState> ttl;
    ColumnFamilySpec spec;
  };
  static constexpr size_t kChunkBits = 8;
  static constexpr size_t kChunkSize = size_t{1} << kChunkBits;
  // Snapshot state ids are 16 bits with 0xFFFF reserved, so no backend needs more.
  static constexpr size_t kMaxColumnFamilies = 65535;
  const CfSlot& Slot(int index) const {
    return chunks_[static_cast<size_t>(index) >> kChunkBits][index & (kChunkSize - 1)];
  }
  rocksdb::Status Append(rocksdb::ColumnFamilyHandle* h, const ColumnFamilySpec& spec,
                         std::shared_ptr<TtlState> ttl, int* index);
  // The TTL halves of Get/Put/Merge (ttl.h), out of the way of the paths of other families.
  rocksdb::Status TtlGet(const CfSlot& s, const rocksdb::Slice& key, rocksdb::PinnableSlice* value,
                         bool nowait);
  rocksdb::Status TtlPut(const CfSlot& s, const rocksdb::Slice& key, const rocksdb::Slice& value,
                         bool nowait);
  rocksdb::Status TtlMerge(const CfSlot& s, const rocksdb::Slice& key,
                           const rocksdb::Slice& operand, bool nowait);

  rocksdb::DB* db_ = nullptr;
  std::string path_;
  std::unique_ptr<CfSlot[]> chunks_[(kMaxColumnFamilies >> kChunkBits) + 1];
  std::atomic<size_t> count_{0};
  std::mutex append_mu_;
  std::shared_ptr<PinRegistry> pins_ = std::make_shared<PinRegistry>();
  std::shared_ptr<TtlClock> clock_ = std::make_shared<TtlClock>();
  std::shared_ptr<CreatedTables> created_ = std::make_shared<CreatedTables>();
  rocksdb::WriteOptions write_options_;
  rocksdb::ReadOptions read_options_;
  rocksdb::WriteOptions nowait_write_options_;
  rocksdb::ReadOptions nowait_read_options_;
  std::atomic<uint64_t> rows_read_{0};
  std::atomic<uint64_t> rows_written_{0};
  std::atomic<uint64_t> rows_deleted_{0};
};

// The smallest key greater than every key starting with prefix ("" if there is none).
std::string PrefixSuccessor(const std::string& prefix);

}  // namespace stateengine
