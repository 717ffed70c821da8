#include "timers.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include <rocksdb/write_batch.h>

#include "codec.h"
#include "keygroups.h"
#include "status_guard.h"

namespace stateengine {
namespace {

// Orders by the timestamp bytes first, then key group, then the rest of the key.
bool TimeOrder(const std::string& a, const std::string& b, int prefix_bytes) {
  const int c = std::memcmp(a.data() + prefix_bytes, b.data() + prefix_bytes, 8);
  if (c != 0) return c < 0;
  const int g = std::memcmp(a.data(), b.data(), prefix_bytes);
  if (g != 0) return g < 0;
  return a.compare(prefix_bytes + 8, std::string::npos, b, prefix_bytes + 8, std::string::npos) < 0;
}

// Calls fn(it, prefix) with it at the first timer of each key group in [kg_start, kg_end]
// that has timers, skipping empty key groups with one seek each to the next non-empty one, so
// the cost follows the groups that hold timers, not max parallelism (up to 32768 groups).
template <typename Fn>
rocksdb::Status ForEachGroupHead(StateDB* db, int cf, int prefix_bytes, int32_t kg_start,
                                 int32_t kg_end, Fn&& fn) {
  rocksdb::ReadOptions ro;
  ro.fill_cache = true;
  std::unique_ptr<rocksdb::Iterator> it(db->raw()->NewIterator(ro, db->handle(cf)));
  std::string prefix(prefix_bytes, '\0');
  WriteKeyGroupPrefix(kg_start, prefix_bytes, &prefix[0]);
  for (it->Seek(prefix); it->Valid();) {
    if (it->key().size() < static_cast<size_t>(prefix_bytes)) {
      return rocksdb::Status::Corruption("timer key shorter than its key-group prefix");
    }
    const int32_t kg = ReadKeyGroupPrefix(it->key().data(), prefix_bytes);
    if (kg > kg_end) break;
    WriteKeyGroupPrefix(kg, prefix_bytes, &prefix[0]);
    if (!fn(it.get(), prefix) || kg == kg_end) break;
    WriteKeyGroupPrefix(kg + 1, prefix_bytes, &prefix[0]);
    it->Seek(prefix);
  }
  return it->status();
}

}  // namespace

namespace {

rocksdb::Status PopDue(StateDB* db, int cf, int prefix_bytes, int32_t kg_start, int32_t kg_end,
                       int64_t max_timestamp, size_t limit, std::vector<std::string>* keys) {
  const uint64_t max_ordered = OrderedI64(max_timestamp);
  const size_t head = static_cast<size_t>(prefix_bytes) + 8;
  auto collect = [&](rocksdb::Iterator* it, const std::string& prefix) {
    for (; it->Valid(); it->Next()) {
      const rocksdb::Slice k = it->key();
      if (k.size() < head || std::memcmp(k.data(), prefix.data(), prefix.size()) != 0) break;
      if (GetBE64(k.data() + prefix_bytes) > max_ordered) break;
      keys->emplace_back(k.data(), k.size());
    }
    return true;
  };
  rocksdb::Status st = ForEachGroupHead(db, cf, prefix_bytes, kg_start, kg_end, collect);
  if (!st.ok()) return st;
  std::sort(keys->begin(), keys->end(),
            [prefix_bytes](const std::string& a, const std::string& b) {
              return TimeOrder(a, b, prefix_bytes);
            });
  if (limit != 0 && keys->size() > limit) keys->resize(limit);
  if (keys->empty()) return rocksdb::Status::OK();
  rocksdb::WriteBatch batch;
  for (const auto& k : *keys) {
    if (!(st = batch.Delete(db->handle(cf), k)).ok()) return st;
  }
  return db->Write(&batch);
}

}  // namespace

rocksdb::Status PopDueTimers(StateDB* db, int cf, int prefix_bytes, int32_t kg_start,
                             int32_t kg_end, int64_t max_timestamp, size_t limit,
                             std::vector<std::string>* keys) {
  // The due timers of a range are read into memory: as many as stored, so guarded.
  return GuardStatus("firing timers", [&] {
    return PopDue(db, cf, prefix_bytes, kg_start, kg_end, max_timestamp, limit, keys);
  });
}

rocksdb::Status NextTimerTimestamp(StateDB* db, int cf, int prefix_bytes, int32_t kg_start,
                                   int32_t kg_end, bool* found, int64_t* timestamp) {
  *found = false;
  const size_t head = static_cast<size_t>(prefix_bytes) + 8;
  auto earliest = [&](rocksdb::Iterator* it, const std::string& prefix) {
    if (it->Valid() && it->key().size() >= head &&
        std::memcmp(it->key().data(), prefix.data(), prefix.size()) == 0) {
      const int64_t ts = FromOrderedI64(GetBE64(it->key().data() + prefix_bytes));
      if (!*found || ts < *timestamp) *timestamp = ts;
      *found = true;
    }
    return true;
  };
  return ForEachGroupHead(db, cf, prefix_bytes, kg_start, kg_end, earliest);
}

}  // namespace stateengine
