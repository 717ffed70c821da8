#include "checkpoint.h"

#include <memory>

#include <rocksdb/utilities/checkpoint.h>

#include "keygroups.h"
#include "status_guard.h"

namespace stateengine {
rocksdb::Status CreateCheckpoint(StateDB* db, const std::string& dir) {
  return GuardStatus("creating a checkpoint", [&]() -> rocksdb::Status {
    rocksdb::Checkpoint* raw = nullptr;
    rocksdb::Status st = rocksdb::Checkpoint::Create(db->raw(), &raw);
    if (!st.ok()) return st;
    std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
    return checkpoint->CreateCheckpoint(dir, /*log_size_for_flush=*/0);
  });
}

rocksdb::Status ClipToKeyGroupRange(StateDB* db, int prefix_bytes, int32_t kg_start,
                                    int32_t kg_end, int32_t max_parallelism) {
  for (size_t cf = 0; cf < db->num_column_families(); ++cf) {
    rocksdb::Status st;
    if (kg_start > 0) {
      st = db->DeleteRange(static_cast<int>(cf), KeyGroupBound(0, prefix_bytes),
                           KeyGroupBound(kg_start, prefix_bytes));
      if (!st.ok()) return st;
    }
    if (kg_end + 1 < max_parallelism) {
      st = db->DeleteRange(static_cast<int>(cf), KeyGroupBound(kg_end + 1, prefix_bytes),
                           KeyGroupBound(max_parallelism, prefix_bytes));
      if (!st.ok()) return st;
    }
  }
  return rocksdb::Status::OK();
}

rocksdb::Status CopyKeyGroupRange(StateDB* src, StateDB* dst,
                                  const std::vector<std::pair<int, int>>& cf_map,
                                  int prefix_bytes, int32_t kg_start, int32_t kg_end,
                                  uint64_t* entries) {
  return GuardStatus("copying key groups", [&]() -> rocksdb::Status {
    const std::string lower = KeyGroupBound(kg_start, prefix_bytes);
    const std::string upper = KeyGroupBound(kg_end + 1, prefix_bytes);
    rocksdb::Slice upper_slice(upper);
    constexpr size_t kBatchBytes = 4 << 20;
    for (const auto& [from, to] : cf_map) {
      rocksdb::ReadOptions ro;
      ro.fill_cache = false;
      ro.readahead_size = 2 << 20;
      ro.iterate_upper_bound = &upper_slice;
      std::unique_ptr<rocksdb::Iterator> it(src->raw()->NewIterator(ro, src->handle(from)));
      rocksdb::WriteBatch batch;
      for (it->Seek(lower); it->Valid(); it->Next()) {
        rocksdb::Status st = batch.Put(dst->handle(to), it->key(), it->value());
        if (!st.ok()) return st;
        ++*entries;
        if (batch.GetDataSize() >= kBatchBytes) {
          if (!(st = dst->Write(&batch)).ok()) return st;
          batch.Clear();
        }
      }
      if (!it->status().ok()) return it->status();
      if (batch.Count() > 0) {
        rocksdb::Status st = dst->Write(&batch);
        if (!st.ok()) return st;
      }
    }
    return rocksdb::Status::OK();
  });
}

}  // namespace stateengine
