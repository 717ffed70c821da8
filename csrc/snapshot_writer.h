// Full snapshot in the unified savepoint layout (FLIP-41). The constructor is the synchronous
// part (it pins one iterator per column family, all at one sequence number); Write is the
// asynchronous part and may run on any thread while the backend keeps taking writes, which
// the pinned iterators do not see. No RocksDB snapshot is registered: releasing one lets
// RocksDB mark every bottommost file for compaction, which rewrites them all and makes the
// next incremental checkpoint upload everything again.
// Stream: meta block (never compressed), then per key group with entries: its offset goes to
// the handle, a fresh snappy framed stream starts, then `u16 state id`, pairs
// `i32 len | key | i32 len | value` (big-endian), the top bit of key[0] set on the last pair
// of a state's run, followed by `u16 next state id` or 0xFFFF at the end of the key group.
// States with TTL leave out what expired at the TTL time of the synchronous part (values and
// map entries whole, list elements one by one); what they keep keeps its timestamps.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rocksdb/db.h>

#include "db.h"

namespace stateengine {

constexpr uint16_t kEndOfKeyGroupMark = 0xFFFF;
constexpr unsigned char kMetaFollowsFlag = 0x80;

struct SnapshotColumn {
  int cf_index;
  int state_id;
};

struct KeyGroupOffset {
  int32_t key_group;
  uint64_t offset;
};

struct SnapshotStats {
  uint64_t entries = 0;
  uint64_t raw_bytes = 0;   // bytes of keys and values
  uint64_t file_bytes = 0;  // bytes written, meta block included
  uint32_t file_crc32c = 0;  // CRC-32C of those bytes
};

class FullSnapshotWriter : public DbPin {
 public:
  FullSnapshotWriter(StateDB* db, std::vector<SnapshotColumn> columns, int prefix_bytes,
                     int32_t kg_start, int32_t kg_end, bool compress);
  ~FullSnapshotWriter();

  // Status of the synchronous part (creating the iterators).
  const rocksdb::Status& status() const { return status_; }
  // Writes the stream to path, fsynced when durable (not for a file staged for an upload).
  // Returns Incomplete if Cancel() was called meanwhile, Aborted if the iterators were freed
  // (released, or the backend closed) before it started.
  rocksdb::Status Write(const std::string& path, const std::string& meta_block, bool durable,
                        std::vector<KeyGroupOffset>* offsets, SnapshotStats* stats);
  // Asks a running Write to stop at its next check (every few thousand entries).
  void Cancel() override { cancelled_.store(true, std::memory_order_relaxed); }
  // Frees the pinned iterators early (the destructor does it otherwise).
  void Release() { Unpin(); }

 protected:
  void FreePinned() override { iterators_.clear(); }

 private:
  std::vector<SnapshotColumn> columns_;
  int prefix_bytes_;
  int32_t kg_start_, kg_end_;
  bool compress_;
  std::string upper_;
  rocksdb::Slice upper_slice_;
  std::vector<std::unique_ptr<rocksdb::Iterator>> iterators_;  // one per column, in order
  // Per column: its TTL (null without TTL, or before a time or duration was set) and duration.
  std::vector<std::shared_ptr<const TtlState>> ttl_;
  std::vector<int64_t> ttl_ms_;
  int64_t ttl_now_ = kTtlTimeUnset;
  rocksdb::Status WriteStream(const std::string& path, const std::string& meta_block,
                              bool durable, std::vector<KeyGroupOffset>* offsets,
                              SnapshotStats* stats);
  rocksdb::Status status_;
  std::atomic<bool> cancelled_{false};
};

// One iterator per column family, all reading the database as of one sequence number,
// without registering a RocksDB snapshot (see FullSnapshotWriter).
rocksdb::Status NewConsistentIterators(StateDB* db, const rocksdb::ReadOptions& ro,
                                       const std::vector<int>& cf_indexes,
                                       std::vector<std::unique_ptr<rocksdb::Iterator>>* out);

// Plain native iteration over the same column families and range (no encoding, no I/O):
// the baseline the benchmark compares snapshot writing against.
rocksdb::Status IterateForBaseline(StateDB* db, const std::vector<int>& cf_indexes,
                                   int prefix_bytes, int32_t kg_start, int32_t kg_end,
                                   SnapshotStats* stats);

}  // namespace stateengine
