#include "scan_cursor.h"

#include <new>

#include <rocksdb/write_batch.h>

namespace stateengine {

ScanCursor::ScanCursor(StateDB* db, int cf, std::string lower, std::string upper, bool reverse,
                       bool access)
    : db_(db),
      handle_(db->handle(cf)),
      ttl_(db->ttl(cf)),
      access_(access),
      lower_(std::move(lower)),
      upper_(std::move(upper)),
      reverse_(reverse) {
  if (ttl_ != nullptr) status_ = ttl_->AccessTime(&now_);
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
  const size_t before = out->size();
  rocksdb::Status st = Fill(limit, out, done);
  // A state's iteration reads rows (metrics); scans of tools and readers do not count.
  if (access_ && it_ && out->size() > before) db_->CountReads(out->size() - before);
  return st;
}

rocksdb::Status ScanCursor::Fill(size_t limit, std::vector<KeyValue>* out, bool* done) {
  *done = true;
  if (!it_) return rocksdb::Status::Aborted("the scan's backend was closed");
  if (!status_.ok()) return status_;
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
    if (ttl_ == nullptr) {
      for (size_t n = 0; it_->Valid(); ++n) {
        out->push_back({it_->key().ToString(), it_->value().ToString()});
        if (limit != 0 && n + 1 >= limit) {
          *done = false;
          return rocksdb::Status::OK();
        }
        reverse_ ? it_->Prev() : it_->Next();
      }
      return it_->status();
    }
    rocksdb::WriteBatch writes;
    size_t n = 0;
    for (; it_->Valid(); reverse_ ? it_->Prev() : it_->Next()) {
      bool taken = false;
      rocksdb::Status st = TakeTtl(out, &writes, &taken);
      if (!st.ok()) return st;
      if (taken && limit != 0 && ++n >= limit) {
        *done = false;
        break;
      }
    }
    if (writes.Count() > 0) {
      rocksdb::Status st = db_->Write(&writes);
      if (!st.ok()) return st;
    }
  } catch (const std::bad_alloc&) {
    return rocksdb::Status::MemoryLimit("out of memory while scanning");
  }
  return *done ? it_->status() : rocksdb::Status::OK();
}

rocksdb::Status ScanCursor::TakeTtl(std::vector<KeyValue>* out, rocksdb::WriteBatch* writes,
                                    bool* taken) {
  KeyValue kv;
  TtlVerdict verdict;
  rocksdb::Status st = ttl_->Read(it_->value(), now_, access_, &verdict, &kv.value, &rewrite_);
  if (!st.ok()) return st;
  if (verdict.write_back == TtlWriteBack::kDelete) {
    st = writes->Delete(handle_, it_->key());
  } else if (verdict.write_back == TtlWriteBack::kRewrite) {
    st = writes->Put(handle_, it_->key(), rewrite_);
  }
  if (!st.ok()) return st;
  *taken = verdict.visible;
  if (*taken) {
    kv.key = it_->key().ToString();
    out->push_back(std::move(kv));
  }
  return rocksdb::Status::OK();
}

}  // namespace stateengine
