// K-way merge over one RocksDB iterator per column family (all reading the same snapshot),
// yielding entries ordered by (key group, state id), then key: the order of the unified
// savepoint layout. Invariant: the heap is touched only when the current iterator leaves its
// key group, so heap work is per (state, key group) run, not per entry.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <rocksdb/iterator.h>

namespace stateengine {

class MergeIterator {
 public:
  struct Input {
    std::unique_ptr<rocksdb::Iterator> it;  // already positioned at its first entry
    int state_id;
  };

  MergeIterator(std::vector<Input> inputs, int prefix_bytes);

  bool Valid() const { return current_ >= 0; }
  rocksdb::Slice key() const { return inputs_[current_].it->key(); }
  rocksdb::Slice value() const { return inputs_[current_].it->value(); }
  int state_id() const { return inputs_[current_].state_id; }
  int32_t key_group() const { return key_group_; }
  // Whether the current entry starts a new key group / a new state run.
  bool is_new_key_group() const { return new_key_group_; }
  bool is_new_state() const { return new_state_; }
  void Next();
  // First non-OK status of any input iterator.
  rocksdb::Status status() const;

 private:
  bool HeapLess(int a, int b) const;  // true if input a sorts after b (min-heap via std heap)
  void PopCurrent();
  int32_t KeyGroupOf(const rocksdb::Slice& key) const;

  std::vector<Input> inputs_;
  std::vector<int> heap_;
  int prefix_bytes_;
  int current_ = -1;
  int32_t key_group_ = -1;
  bool new_key_group_ = true;
  bool new_state_ = true;
  rocksdb::Status status_;
};

}  // namespace stateengine
