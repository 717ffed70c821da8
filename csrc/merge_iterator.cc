#include "merge_iterator.h"

#include <algorithm>
#include <cstring>

#include "keygroups.h"

namespace stateengine {

MergeIterator::MergeIterator(std::vector<Input> inputs, int prefix_bytes)
    : inputs_(std::move(inputs)), prefix_bytes_(prefix_bytes) {
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (inputs_[i].it->Valid()) {
      heap_.push_back(static_cast<int>(i));
    } else if (!inputs_[i].it->status().ok() && status_.ok()) {
      status_ = inputs_[i].it->status();
    }
  }
  auto cmp = [this](int a, int b) { return HeapLess(a, b); };
  std::make_heap(heap_.begin(), heap_.end(), cmp);
  PopCurrent();
  new_key_group_ = new_state_ = Valid();
}

int32_t MergeIterator::KeyGroupOf(const rocksdb::Slice& key) const {
  return ReadKeyGroupPrefix(key.data(), prefix_bytes_);
}

bool MergeIterator::HeapLess(int a, int b) const {
  const int32_t ka = KeyGroupOf(inputs_[a].it->key());
  const int32_t kb = KeyGroupOf(inputs_[b].it->key());
  if (ka != kb) return ka > kb;
  return inputs_[a].state_id > inputs_[b].state_id;
}

void MergeIterator::PopCurrent() {
  if (heap_.empty()) {
    current_ = -1;
    return;
  }
  auto cmp = [this](int a, int b) { return HeapLess(a, b); };
  std::pop_heap(heap_.begin(), heap_.end(), cmp);
  current_ = heap_.back();
  heap_.pop_back();
  key_group_ = KeyGroupOf(inputs_[current_].it->key());
}

void MergeIterator::Next() {
  new_key_group_ = false;
  new_state_ = false;
  const int32_t old_group = key_group_;
  rocksdb::Iterator* it = inputs_[current_].it.get();
  it->Next();
  if (it->Valid()) {
    if (KeyGroupOf(it->key()) == old_group) return;  // the common case: same run continues
    const int previous = current_;
    heap_.push_back(current_);
    auto cmp = [this](int a, int b) { return HeapLess(a, b); };
    std::push_heap(heap_.begin(), heap_.end(), cmp);
    PopCurrent();
    new_state_ = current_ != previous;
  } else {
    if (!it->status().ok() && status_.ok()) status_ = it->status();
    PopCurrent();
    new_state_ = true;
  }
  new_key_group_ = Valid() && key_group_ != old_group;
}

rocksdb::Status MergeIterator::status() const { return status_; }

}  // namespace stateengine
