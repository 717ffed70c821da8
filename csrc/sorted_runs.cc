#include "sorted_runs.h"

#include <algorithm>
#include <memory>

#include <rocksdb/comparator.h>
#include <rocksdb/metadata.h>
#include <rocksdb/table_properties.h>

#include "db.h"

namespace stateengine {
namespace {

bool MemtablesEmpty(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* h) {
  // Both counts include range tombstones (MemTable::Add counts every entry).
  uint64_t active = 1, immutable = 1;
  return db->GetIntProperty(h, "rocksdb.num-entries-active-mem-table", &active) &&
         db->GetIntProperty(h, "rocksdb.num-entries-imm-mem-tables", &immutable) &&
         active == 0 && immutable == 0;
}

}  // namespace

SortedRuns::~SortedRuns() {
  // Iterators before the readers they read.
  for (Run& run : runs_) {
    for (File& f : run.files) f.it.reset();
  }
}

void SortedRuns::Open(StateDB* db, rocksdb::ColumnFamilyHandle* h, const rocksdb::Slice& first,
                      const rocksdb::Slice& last, std::unique_ptr<SortedRuns>* out) {
  out->reset();
  rocksdb::DB* raw = db->raw();
  if (!MemtablesEmpty(raw, h)) return;
  const rocksdb::Options options = raw->GetOptions(h);
  // Keys are compared here as bytes, as the files order them.
  if (options.comparator != rocksdb::BytewiseComparator()) return;
  rocksdb::ColumnFamilyMetaData meta;
  raw->GetColumnFamilyMetaData(h, &meta);
  std::unique_ptr<SortedRuns> r(new SortedRuns());
  size_t files = 0;
  auto overlaps = [&](const rocksdb::SstFileMetaData& f) {
    return rocksdb::Slice(f.smallestkey).compare(last) <= 0 &&
           rocksdb::Slice(f.largestkey).compare(first) >= 0;
  };
  auto add = [&](Run* run, const rocksdb::SstFileMetaData& f) {
    run->files.push_back(File{f.smallestkey, f.largestkey,
                              std::make_unique<rocksdb::SstFileReader>(options), nullptr});
    return run->files.back().reader->Open(f.directory + "/" + f.relative_filename).ok();
  };
  for (const rocksdb::LevelMetaData& level : meta.levels) {
    std::vector<const rocksdb::SstFileMetaData*> in;
    for (const auto& f : level.files) {
      if (overlaps(f)) in.push_back(&f);
    }
    files += in.size();
    if (files > kMaxFiles) return;
    if (level.level == 0) {  // each file a run, the newest first
      std::sort(in.begin(), in.end(), [](const auto* a, const auto* b) {
        return a->largest_seqno > b->largest_seqno;
      });
      for (const auto* f : in) {
        r->runs_.emplace_back();
        if (!add(&r->runs_.back(), *f)) return;
      }
    } else if (!in.empty()) {  // one run of files in key order
      std::sort(in.begin(), in.end(), [](const auto* a, const auto* b) {
        return rocksdb::Slice(a->smallestkey).compare(b->smallestkey) < 0;
      });
      r->runs_.emplace_back();
      for (const auto* f : in) {
        if (!add(&r->runs_.back(), *f)) return;
      }
    }
  }
  // What each file holds: nothing but values, and point tombstones only where nothing older
  // lies beneath them.
  uint64_t raw_bytes = 0;
  for (size_t i = 0; i < r->runs_.size(); ++i) {
    for (const File& file : r->runs_[i].files) {
      const auto props = file.reader->GetTableProperties();
      if (props == nullptr || props->num_range_deletions != 0 || props->num_merge_operands != 0 ||
          (props->num_deletions != 0 && i + 1 != r->runs_.size())) {
        return;
      }
      raw_bytes += props->raw_key_size + props->raw_value_size;
    }
  }
  // Blocks of a state larger than half the block cache would only evict each other (and the
  // point lookups' working set) before the next batch reads them: inserting them cost ~6% of
  // a 20M-row batch's read. A smaller state's blocks stay cached for the next batch.
  r->ro_.fill_cache = raw_bytes <= MemoryBudget::Instance().cache_capacity() / 2;
  r->upper_ = last.ToString();
  r->upper_.push_back('\0');
  r->upper_slice_ = rocksdb::Slice(r->upper_);
  r->ro_.iterate_upper_bound = &r->upper_slice_;
  *out = std::move(r);
}

rocksdb::Status SortedRuns::Find(const rocksdb::Slice& key, bool* found, rocksdb::Slice* value) {
  for (Run& run : runs_) {
    rocksdb::Status st = FindIn(&run, key, found, value);
    if (!st.ok() || *found) return st;
  }
  *found = false;
  return rocksdb::Status::OK();
}

rocksdb::Status SortedRuns::FindIn(Run* run, const rocksdb::Slice& key, bool* found,
                                   rocksdb::Slice* value) {
  *found = false;
  while (run->at < run->files.size() &&
         CompareKeys(run->files[run->at].largest, key) < 0) {
    ++run->at;
  }
  if (run->at == run->files.size()) return rocksdb::Status::OK();
  File& file = run->files[run->at];
  if (CompareKeys(file.smallest, key) > 0) return rocksdb::Status::OK();
  rocksdb::Iterator* it = file.it.get();
  if (it == nullptr) {
    file.it.reset(file.reader->NewIterator(ro_));
    it = file.it.get();
    it->Seek(key);
  } else {
    StepTo(it, key);
  }
  if (!it->Valid()) return it->status();
  if (CompareKeys(it->key(), key) == 0) {
    *found = true;
    *value = it->value();
  }
  return rocksdb::Status::OK();
}

}  // namespace stateengine
