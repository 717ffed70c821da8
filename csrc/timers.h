// Timers live in their own column family with keys [kg][timestamp, sign flipped, big-endian]
// [key][namespace] and empty values, so within a key group they iterate in time order.
// Invariant: PopDueTimers returns due timers in (timestamp, key group, key, namespace) order
// across the whole range and deletes exactly those it returns, in one atomic batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "db.h"

namespace stateengine {

rocksdb::Status PopDueTimers(StateDB* db, int cf, int prefix_bytes, int32_t kg_start,
                             int32_t kg_end, int64_t max_timestamp, size_t limit,
                             std::vector<std::string>* keys);

// Smallest timestamp of any timer in the range, or false if there is none.
rocksdb::Status NextTimerTimestamp(StateDB* db, int cf, int prefix_bytes, int32_t kg_start,
                                   int32_t kg_end, bool* found, int64_t* timestamp);

}  // namespace stateengine
