// Batch state access over whole columns (numpy and Arrow buffers): keys are encoded, hashed,
// range-checked and turned into composite keys in one C++ loop, then applied as one sorted
// WriteBatch or one sorted MultiGet.
// Invariant: a batch is validated completely (key groups, value encodings) before RocksDB sees
// any of it, and its rows are ordered by composite key and, within one key, by input position,
// so duplicates end up exactly as if the scalar calls had run one after another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <rocksdb/slice.h>
#include <rocksdb/status.h>

#include "codec.h"
#include "db.h"
#include "merge_operators.h"

namespace stateengine {

// How one column (keys, user keys or values) lies in memory; plain ints for the bindings.
enum ColumnKind : int {
  kColInt64 = 0,       // int64 per row (native byte order)
  kColFloat64 = 1,     // double per row
  kColBool = 2,        // one byte per row, 0 or 1
  kColOffsets32 = 3,   // Arrow string/binary: int32 offsets[size + 1] into data
  kColOffsets64 = 4,   // Arrow large_string/large_binary, or bytes the bindings encoded
  kColFixedBytes = 5,  // numpy 'S': width bytes per row; trailing NULs are padding
  kColUcs4 = 6,        // numpy 'U': width UCS-4 code points per row; trailing NULs are padding
  kColSlices = 7,      // one (pointer, length) per row: the str/bytes objects of an object array
};

struct ColumnView {
  int kind = kColInt64;
  size_t size = 0;
  const char* data = nullptr;
  const int32_t* offsets32 = nullptr;
  const int64_t* offsets64 = nullptr;
  size_t width = 0;
  const rocksdb::Slice* slices = nullptr;
  // Byte-like rows hold text (UTF-8 after conversion) rather than binary.
  bool text = false;
  // Byte-like rows are already in the target codec and are copied as they are.
  bool encoded = false;
  // Optional: rows whose value is None (a put of None deletes, as update(None) does).
  const uint8_t* is_null = nullptr;
};

enum BatchErrorCode : int {
  kBatchOk = 0,
  kBatchKeyGroupOutOfRange = 1,  // row's key belongs to a key group outside the backend's range
  kBatchValueOutOfRange = 2,     // a number does not fit its codec (32-bit int or float)
  kBatchInvalidText = 3,         // a UCS-4 row holds a surrogate or a code point past U+10FFFF
  kBatchUnsupported = 4,         // this column kind cannot be encoded by this codec
  kBatchBadKey = 5,              // an encoded key does not parse under the key schema
  kBatchCorrupt = 6,             // a stored value is not a valid encoding of its codec
  kBatchTooLarge = 7,            // more rows than 32-bit row indices hold
  kBatchNoMemory = 8,            // the batch's keys or values did not fit in memory
};

// Which row failed and why; filled in when a batch function returns false or a non-OK status.
struct BatchError {
  int code = kBatchOk;
  size_t row = 0;
  int32_t key_group = -1;
  bool user_key = false;  // the row's user key failed, not its key
};

// True if EncodeColumnRow handles this (kind, codec); otherwise the bindings encode the rows
// themselves and pass them as encoded bytes. Keys normalize floats (-0.0, NaN) like the
// scalar path; values keep their bits.
bool CanEncodeColumn(int kind, bool text, Codec codec, bool is_key);
// True if rows of this kind are operands of a native numeric merge in this codec (the same
// types the scalar add() of a native reducer accepts).
bool CanMergeNumbers(int kind, Codec codec);

// Appends row's encoding under codec to out. scratch holds converted UCS-4 text.
int EncodeColumnRow(const ColumnView& col, size_t row, Codec codec, bool is_key, std::string* out,
                    std::string* scratch);

// Where a batch goes: the backend's key layout and range plus one state's namespace.
struct BatchTarget {
  const KeySchema* schema = nullptr;
  int prefix_bytes = 1;
  int32_t max_parallelism = 128;
  int32_t kg_start = 0;
  int32_t kg_end = 127;
  const std::string* ns = nullptr;
  bool ns_variable = false;
};

// A bigint key of a batch as it sorts: by key group (less the target's first), then by its
// value's 8 bytes as an unsigned number (the namespace is the same in every row of a call).
struct BigintKey {
  uint64_t v;
  uint32_t kg;
  uint32_t row;
};

// The composite keys of a batch, sorted, with rows grouped by distinct key.
class KeyBatch {
 public:
  // Encodes and hashes every key, checks its key group and builds [kg][key][ns] (+ the user
  // key encoded with uk_codec when user_keys is given). False (with err) before anything is kept
  // if any row fails.
  bool Build(const BatchTarget& target, const ColumnView& keys, const ColumnView* user_keys,
             Codec uk_codec, BatchError* err);

  size_t rows() const { return group_of_.size(); }
  size_t groups() const { return group_start_.empty() ? 0 : group_start_.size() - 1; }
  // Rows in composite-key order; rows of one key stay in input order.
  const std::vector<uint32_t>& order() const { return order_; }
  // Distinct-key index of each row; groups are numbered in key order.
  const std::vector<uint32_t>& group_of() const { return group_of_; }
  // Group g is order()[group_start()[g] .. group_start()[g + 1]).
  const std::vector<uint32_t>& group_start() const { return group_start_; }
  // The distinct keys back to back in key order (row r's key is group_key(group_of()[r])).
  rocksdb::Slice group_key(size_t g) const {
    return rocksdb::Slice(group_arena_.data() + group_offsets_[g],
                          group_offsets_[g + 1] - group_offsets_[g]);
  }

 private:
  // Row r's key while the rows are sorted (not kept for bigint keys, which sort without it).
  rocksdb::Slice row_key(size_t row) const {
    return rocksdb::Slice(arena_.data() + offsets_[row], offsets_[row + 1] - offsets_[row]);
  }
  bool BuildRows(const BatchTarget& target, const ColumnView& keys, const ColumnView* user_keys,
                 Codec uk_codec, BatchError* err);
  bool BuildBigint(const BatchTarget& target, const ColumnView& keys, BatchError* err);
  // True if the batch holds what BuildBigint would build from (target, keys) now.
  bool BuiltFrom(const BatchTarget& target, const ColumnView& keys) const;
  // Fills order_, group_of_ and group_start_ from the built keys.
  void SortRows();
  // The same for BuildBigint's keys (each width bytes), and the group keys from the entries.
  void SortBigints(std::vector<BigintKey>* entries, bool values_sorted, const BatchTarget& t,
                   size_t width);
  // group_arena_ / group_offsets_ from the arena, once the groups are known.
  void CopyGroupKeys();
  template <int W>
  void SortWords();
  // order_, group_of_ and group_start_ from n rows in sorted order: row_at(i) is the i-th,
  // same_as_previous(i) whether its key equals the (i-1)-th's.
  template <typename RowAt, typename SameAsPrevious>
  void Group(size_t n, RowAt row_at, SameAsPrevious same_as_previous);

  std::string arena_;
  std::vector<size_t> offsets_;
  std::vector<uint32_t> order_;
  std::vector<uint32_t> group_of_;
  std::vector<uint32_t> group_start_;
  int prefix_bytes_ = 0;  // the key-group prefix's bytes
  // What BuildBigint last built from (the bigint column's bytes and the target), so building
  // the same keys again (put_many of the keys get_many just read) keeps what is built.
  bool bigint_valid_ = false;
  std::string bigint_input_;
  BatchTarget bigint_target_;
  std::string bigint_ns_;
  std::string group_arena_;
  std::vector<size_t> group_offsets_;
};

// Writes into a state with TTL are stamped with the TTL time (ttl.h), as point writes are.
// One WriteBatch of puts, one per distinct key: the key's last row wins (rows marked null
// delete it). With per_group, values holds one row per group instead of one per input row.
// map_values prefixes each value with Flink's map null-flag byte (encoded columns carry it).
rocksdb::Status BatchPut(StateDB* db, int cf, const KeyBatch& batch, const ColumnView& values,
                         Codec value_codec, bool map_values, bool per_group, BatchError* err);

// One WriteBatch with one merge per distinct key: the key's rows are reduced with op first
// (count: every row adds 1) and written as a number in codec. With TTL the reduced rows are
// folded into each key's stored value in C++ and put (StateDB::TtlMerge).
rocksdb::Status BatchMergeNumbers(StateDB* db, int cf, const KeyBatch& batch,
                                  const ColumnView& values, Codec codec, NumericOp op,
                                  bool count, BatchError* err);

// One WriteBatch with one merge per distinct key: the key's elements joined with ',' in input
// order, as add_all would merge them.
rocksdb::Status BatchMergeList(StateDB* db, int cf, const KeyBatch& batch,
                               const ColumnView& values, Codec codec, BatchError* err);

// Stored values of every distinct key, fetched with sorted MultiGets.
struct BatchValues {
  std::vector<uint8_t> found;   // per group
  std::string data;             // values of found groups, back to back
  std::vector<size_t> offsets;  // per group + 1
  rocksdb::Slice value(size_t g) const {
    return rocksdb::Slice(data.data() + offsets[g], offsets[g + 1] - offsets[g]);
  }
  // Frees the values (the keys' batch outlives them when it is kept for reuse).
  void Release() { *this = BatchValues(); }
};

// Room in data for n values of the size of what it holds now (its first value): a hint,
// capped at 128 MiB so that a long first value cannot ask for much more than is needed. A
// batch's bytes in a string grown by doubling are copied, and their pages faulted in, about
// twice over.
void ReserveLike(std::string* data, size_t n);

// How batch reads fetch a batch's distinct keys: sorted MultiGets, or for dense batches (at
// least one key per 6 of the column family's entries) a forward walk: table file by table
// file where SortedRuns may (sorted_runs.h), else one merged iterator. kReadAuto chooses; the
// others force one way, for tests and measurements (kReadRuns still walks the merged iterator
// where SortedRuns declines). Process-wide; returns the old mode.
enum BatchReadMode : int { kReadAuto = 0, kReadPoint = 1, kReadScan = 2, kReadRuns = 3 };
int SetBatchReadMode(int mode);
// How many batch reads went each way since the process started: [point, merged, runs].
void BatchReadCounts(uint64_t out[3]);
// In a state with TTL they are what point reads see (ttl.h), and what the reads leave behind
// (cleanup of expired entries, refreshed stamps) is written once at the end, unless
// write_back is false (reads of a read-modify-write, which writes every key anyway). A mode
// other than kReadAuto reads that way, whatever SetBatchReadMode says.
rocksdb::Status BatchGet(StateDB* db, int cf, const KeyBatch& batch, BatchValues* out,
                         bool write_back = true, int mode = kReadAuto);
// Receives a batch read's values one group at a time, in key order: value is null where the
// key holds nothing, and valid only during the call. A non-OK status ends the read.
class GroupVisitor {
 public:
  virtual ~GroupVisitor() = default;
  virtual rocksdb::Status Visit(size_t group, const rocksdb::Slice* value) = 0;
};
// Reads as BatchGet does (the same keys, the same way, counted alike), but hands each value to
// the visitor instead of copying it into a BatchValues: a reader that decodes every value at
// once keeps no copy of the batch's values. Column families with TTL are refused
// (InvalidArgument): their reads may write back.
rocksdb::Status VisitBatch(StateDB* db, int cf, const KeyBatch& batch, GroupVisitor* visitor,
                           int mode = kReadAuto);
// kStored: the stored bytes, timestamps included; kRead / kReadOnly: BatchGet with / without
// write-backs.
enum class GroupRead { kStored, kRead, kReadOnly };
rocksdb::Status GetGroups(StateDB* db, int cf, const KeyBatch& batch, GroupRead how,
                          BatchValues* out, int mode = kReadAuto);

// Decodes the values of a BIGINT, DOUBLE or numeric ANY codec into one number per input row
// (fill where nothing is stored). skip_map_flag reads map values: a None-valued entry counts
// as found and gets fill. False (with err) on a value that is not a number of the codec.
bool ScatterInt64(const KeyBatch& batch, const BatchValues& values, Codec codec,
                  bool skip_map_flag, int64_t fill, int64_t* out, uint8_t* found,
                  BatchError* err);
bool ScatterFloat64(const KeyBatch& batch, const BatchValues& values, Codec codec,
                    bool skip_map_flag, double fill, double* out, uint8_t* found,
                    BatchError* err);

}  // namespace stateengine
