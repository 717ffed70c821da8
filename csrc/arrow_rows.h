// Typed columns <-> struct-codec encodings (row_codec.h) over the Arrow C Data Interface
// (arrow_c.h). Batch writes encode every row of an Arrow array of the schema's Arrow type in
// one C++ loop over its validity bitmaps, offsets and child arrays; batch reads build Arrow
// arrays in buffers allocated here, which pyarrow imports without a copy and frees through
// the arrays' release callbacks. Nothing here links libarrow.
// Invariant: an input array's type is checked against the schema before any row is read,
// every row is encoded before the caller writes anything, and an output array is handed over
// only when complete (on any error its buffers are freed and nothing is exported).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <rocksdb/slice.h>

#include "arrow_c.h"
#include "batch_ops.h"
#include "row_codec.h"
#include "row_evolution.h"

namespace stateengine {

enum RowErrorCode : int {
  kRowOk = 0,
  kRowArrowType = 1,    // an Arrow column's type is not the schema's (at path)
  kRowNull = 2,         // a null where the schema says NOT NULL (or a map key)
  kRowOutOfRange = 3,   // a date or timestamp outside years 1..9999, a decimal beyond precision
  kRowCorrupt = 4,      // stored bytes are not a valid encoding of the schema
  kRowTooLarge = 5,     // a column beyond Arrow's 32-bit offsets
  kRowNoMemory = 6,
  kRowNullRow = 7,      // a null row where rows cannot be null (list elements, user keys)
  kRowInvalidText = 8,  // a string that is not valid UTF-8
};

// Which row failed, and where inside it: path steps from the root as
// stateengine.sparktypes.path_name reads them (struct: field index; array: element index;
// map: 2 * entry + 0 for its key, 1 for its value).
struct RowError {
  int code = kRowOk;
  int64_t row = 0;
  std::vector<int64_t> path;
};

// What a null row of the input means.
enum NullRows : int {
  kNullRowsRefuse = 0,   // an error (list elements, map user keys)
  kNullRowsMark = 1,     // nulls[row] = 1 and no bytes (ValueState: a None value deletes)
  kNullRowsMapFlag = 2,  // every row starts with Flink's map null flag: 1 alone for null rows
};

// Encodes every row of `array` (Arrow type `type`) under the schema's root node into data,
// row r at [offsets[r], offsets[r + 1]) (offsets gets length + 1 entries), each non-null row
// after `prefix` (an evolved state's version marker, else empty). False with err if the type
// does not match or any row fails; the outputs are then unspecified.
bool EncodeArrowRows(const RowSchema& schema, const ArrowSchema* type, const ArrowArray* array,
                     int null_rows, const std::string& prefix, std::string* data,
                     std::vector<int64_t>* offsets, std::vector<uint8_t>* nulls, RowError* err);

// How stored values of a state lie in RocksDB.
enum StoredLayout : int {
  kStoredValue = 0,     // one value (value, reducing, aggregating state)
  kStoredMapValue = 1,  // null flag byte, then the value unless the flag is 1
  kStoredList = 2,      // elements joined by ','; decoded as one Arrow list per row
};

// One Arrow array with a row per input row of a batch read: the stored value of the row's key
// (kStoredList: its list; a key without a list gets an empty list); rows whose key holds
// nothing get `fill` (the encoding of a ValueState's default) or null. found[row] says whether
// the key holds a value. False with err (row = an input row) on a malformed stored value.
// versions: an evolved state's schema versions, whose old values are upgraded to `schema`
// (fill is already in it); null for a state that never evolved.
bool DecodeBatchToArrow(const RowSchema& schema, const RowVersions* versions,
                        const KeyBatch& batch, const BatchValues& values, int layout,
                        const std::string* fill, ArrowArray* out, uint8_t* found,
                        RowError* err);

// BatchGet and DecodeBatchToArrow (kStoredValue) in one pass, each value decoded into its rows
// as the read meets it (VisitBatch), without a copy of the batch's values in between; for a
// state without TTL or schema versions whose schema is a struct of fixed-width scalars only.
// *handled is false for any other state, which nothing has then been read from; otherwise
// the result is DecodeBatchToArrow's (a non-OK status from RocksDB, or false in err->code).
rocksdb::Status ReadBatchToArrow(StateDB* db, int cf, const RowSchema& schema,
                                 const RowVersions* versions, const KeyBatch& batch,
                                 const std::string* fill, ArrowArray* out, uint8_t* found,
                                 RowError* err, bool* handled);

// One Arrow array with a row per stored value (null where a map value is None).
bool DecodeSlicesToArrow(const RowSchema& schema, const RowVersions* versions,
                         const std::vector<rocksdb::Slice>& values, int layout, ArrowArray* out,
                         RowError* err);

}  // namespace stateengine
