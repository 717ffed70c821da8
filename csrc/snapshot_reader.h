// Restore from full snapshots: reads only the key groups asked for, each from its recorded
// offset, so restoring a sub-range (rescaling) never decodes other key groups.
// Invariant: a key group is applied only after its whole section decoded and checked (CRCs,
// key-group prefixes, state ids, end mark); a damaged section leaves nothing of itself behind.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "db.h"
#include "file_io.h"

namespace stateengine {

struct RestoreStats {
  uint64_t entries = 0;
  uint64_t raw_bytes = 0;
  uint64_t key_groups = 0;
};

class FullSnapshotReader {
 public:
  rocksdb::Status Open(const std::string& path);
  // Restores key group kg from the section at offset. cf_for_state[state id] is the target
  // column family index, or -1 to skip that state.
  rocksdb::Status RestoreKeyGroup(int32_t kg, uint64_t offset, bool compressed, int prefix_bytes,
                                  const std::vector<int>& cf_for_state, StateDB* db,
                                  RestoreStats* stats);
  uint64_t size() const { return in_.size(); }

 private:
  FileReader in_;
  std::string key_, value_;
};

}  // namespace stateengine
