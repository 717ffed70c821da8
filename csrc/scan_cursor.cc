#include "scan_cursor.h"

#include <new>

namespace stateengine {

ScanCursor::ScanCursor(StateDB* db, int cf, std::string lower, std::string upper, bool reverse)
    : lower_(std::move(lower)), upper_(std::move(upper)), reverse_(reverse) {
  lower_slice_ = rocksdb::Slice(lower_);
  upper_slice_ = rocksdb::Slice(upper_);
  rocksdb::ReadOptions ro;
  ro.iterate_lower_bound = &lower_slice_;
  if (!upper_.empty()) ro.iterate_upper_bound = &upper_slice_;
  ro.fill_cache = false;  // scans must not evict the working set of point lookups
  it_.reset(db->raw()->NewIterator(ro, db->handle(cf)));
  PinTo(db);
}

ScanCursor::~ScanCursor() { Unpin(); }

rocksdb::Status ScanCursor::Next(size_t limit, std::vector<KeyValue>* out, bool* done) {
  *done = true;
  if (!it_) return rocksdb::Status::Aborted("the scan's backend was closed");
  try {
    if (!started_) {
      started_ = true;
      if (reverse_) {
        it_->SeekToLast();
      } else {
        it_->Seek(lower_slice_);
      }
    } else if (it_->Valid()) {
      reverse_ ? it_->Prev() : it_->Next();
    }
    // The iterator stays on the last entry handed out: stepping past it is the next call's
    // work, so a chunk that ends the range and one that does not look the same.
    for (size_t n = 0; it_->Valid(); ++n) {
      out->push_back({it_->key().ToString(), it_->value().ToString()});
      if (limit != 0 && n + 1 >= limit) {
        *done = false;
        return rocksdb::Status::OK();
      }
      reverse_ ? it_->Prev() : it_->Next();
    }
  } catch (const std::bad_alloc&) {
    return rocksdb::Status::MemoryLimit("out of memory while scanning");
  }
  return it_->status();
}

}  // namespace stateengine
