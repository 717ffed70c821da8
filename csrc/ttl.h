// State time-to-live (Flink's StateTtlConfig) for the column families of states that enable it.
// Invariant: a TTL column family keeps, with every value, list element and map entry, its last
// access time (ms, 8 bytes big-endian) where Flink's RocksDB backend keeps it: before the value
// (value, reducing, aggregating), after the map null-flag byte, before each list element. An
// entry is expired at `now` when ts + ttl <= now (ttl clipped so the sum cannot overflow).
// Time only ever comes from the caller (TtlClock), never from a wall clock; the duration and the
// update/visibility settings are configuration set when the state registers, never persisted.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>

#include <rocksdb/compaction_filter.h>
#include <rocksdb/iterator.h>
#include <rocksdb/slice.h>
#include <rocksdb/status.h>

#include "codec.h"
#include "merge_operators.h"
#include "row_codec.h"
#include "row_evolution.h"

namespace stateengine {

// Where a column family keeps its timestamps; persisted as the state's "ttl" attribute plus
// its kind, so a restored family knows its layout before its descriptor registers.
enum class TtlLayout : uint8_t { kNone = 0, kValue = 1, kMap = 2, kList = 3 };

constexpr size_t kTtlStampBytes = 8;
constexpr int64_t kTtlTimeUnset = std::numeric_limits<int64_t>::min();

// Whether an entry's expiry (last access + ttl) is int64 milliseconds. Python refuses TTL times
// and TTLs whose sum is not (stateengine/ttl.py), so a stored time outside was written by
// something else (a TTL changed since, raw bytes, damage): reads refuse it.
inline bool TtlExpiryInRange(int64_t ts, int64_t ttl) {
  return ts <= std::numeric_limits<int64_t>::max() - ttl;
}

// Flink's TtlUtils.expired: last access + ttl <= now, without overflowing.
inline bool TtlExpired(int64_t ts, int64_t ttl, int64_t now) {
  const int64_t room = ts > 0 ? std::min(std::numeric_limits<int64_t>::max() - ts, ttl) : ttl;
  return ts + room <= now;
}

// The latest time the caller gave (KeyedStateBackend.set_ttl_time): one per StateDB, read by
// state accesses and, on RocksDB's background threads, by the compaction filters.
class TtlClock {
 public:
  void Set(int64_t ms) { now_.store(ms, std::memory_order_release); }
  int64_t now() const { return now_.load(std::memory_order_acquire); }

 private:
  std::atomic<int64_t> now_{kTtlTimeUnset};
};

// What a read leaves behind in the stored entry: Flink removes an expired entry it reads and,
// under OnReadAndWrite, stores the entry again with the time of the read.
enum class TtlWriteBack : uint8_t { kNone = 0, kDelete = 1, kRewrite = 2 };

struct TtlVerdict {
  bool visible = false;  // the read returns the entry (or, for lists, some elements)
  TtlWriteBack write_back = TtlWriteBack::kNone;
};

class TtlState {
 public:
  // numeric: a native reducer/aggregate (SUM/MIN/MAX/COUNT) whose adds fold in C++ (Fold).
  TtlState(TtlLayout layout, Codec value_codec, bool numeric, NumericOp op,
           std::shared_ptr<TtlClock> clock, std::string name = "");

  TtlLayout layout() const { return layout_; }
  bool numeric() const { return numeric_; }
  const TtlClock& clock() const { return *clock_; }

  // The registered descriptor's settings; until then (a state restored but not registered
  // yet) nothing expires and accesses are refused. row_program: the compiled value schema
  // (sparktypes.program) of a typed state, whose list elements need it to be measured, and
  // row_versions (evolution.History.spec) when its schema evolved (elements of older
  // versions carry markers); kept from the first call on, as background compactions may be
  // reading them.
  rocksdb::Status Configure(int64_t ttl_ms, bool update_on_read, bool return_expired,
                            const std::string& row_program,
                            const std::string& row_versions = std::string());
  int64_t ttl_ms() const { return ttl_ms_.load(std::memory_order_acquire); }
  bool update_on_read() const { return update_on_read_.load(std::memory_order_relaxed); }
  bool return_expired() const { return return_expired_.load(std::memory_order_relaxed); }

  // The time of a state access; InvalidArgument (a TtlTimeNotSetError in Python) if the
  // caller never set one.
  rocksdb::Status AccessTime(int64_t* now) const;

  // The stored form of plain, the bytes the bindings encoded (a value, a map value with its
  // null flag, or list elements joined by ','), stamped with now.
  rocksdb::Status Stamp(const rocksdb::Slice& plain, int64_t now, std::string* out) const;

  // A read of a stored entry at now. Appends the returned plain bytes to *plain unless the
  // layout is kValue and plain is null (the caller then drops the first kTtlStampBytes
  // itself, without a copy). With write_back, a kRewrite verdict leaves the entry to store in
  // *rewrite; without it the verdict's write_back is kNone (reads that are about to write).
  // A stored time whose expiry leaves int64 ms is InvalidArgument("stateengine.ttl-range:
  // ...", a TtlTimeRangeError in Python).
  rocksdb::Status Read(const rocksdb::Slice& stored, int64_t now, bool write_back,
                       TtlVerdict* verdict, std::string* plain, std::string* rewrite) const;

  // Length of the list element at p (n bytes available) under the value codec; false if it
  // does not parse.
  bool ElementLength(const char* p, size_t n, size_t* len) const;

  // Cleanup at now (full snapshots, compactions): *keep false when the entry expired
  // entirely; for a list with some expired elements, *changed and *kept (the unexpired
  // elements, timestamps as written). Entries it cannot parse are kept.
  void Purge(const rocksdb::Slice& stored, int64_t now, int64_t ttl, bool* keep, bool* changed,
             std::string* kept) const;

  // A native add at now: the stored entry (null if none) folded with operand (a number in the
  // value codec), restarting from operand if the entry expired (unless expired values are
  // returned), stamped with now. Callers hold fold_mutex() from their read to their write.
  rocksdb::Status Fold(const rocksdb::Slice* stored, const rocksdb::Slice& operand, int64_t now,
                       std::string* out) const;
  std::mutex& fold_mutex() const { return fold_mu_; }

 private:
  const TtlLayout layout_;
  const Codec codec_;
  const bool numeric_;
  const NumericOp op_;
  const std::shared_ptr<TtlClock> clock_;
  const std::string name_;  // the state's, for messages
  std::unique_ptr<RowSchema> row_;  // kStruct values: set once, before ttl_ms_ is published
  std::unique_ptr<RowVersions> versions_;  // an evolved kStruct state's versions, likewise
  std::atomic<int64_t> ttl_ms_{0};
  std::atomic<bool> update_on_read_{false};
  std::atomic<bool> return_expired_{false};
  mutable std::mutex fold_mu_;
};

// Flink's FlinkCompactionFilter: drops expired values and map entries, and expired elements
// of lists (values and merge operands), using the latest time the caller set. Does nothing
// until the state's descriptor configured its TTL, or before any time was set.
std::shared_ptr<rocksdb::CompactionFilterFactory> NewTtlCompactionFilterFactory(
    std::shared_ptr<const TtlState> state);

// An iterator over base that skips the entries expired at now and drops the expired elements
// of lists (full snapshots leave expired state out). Forward only: Seek/SeekToFirst/Next.
std::unique_ptr<rocksdb::Iterator> NewTtlPurgingIterator(std::unique_ptr<rocksdb::Iterator> base,
                                                         std::shared_ptr<const TtlState> state,
                                                         int64_t now, int64_t ttl);

}  // namespace stateengine
