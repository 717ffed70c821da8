// Restore from full snapshots: reads only the key groups asked for, each from its recorded
// offset, so restoring a sub-range (rescaling) never decodes other key groups.
// Invariant: decoded entries reach RocksDB only after the data they belong to decoded and
// checked completely (CRCs, key-group prefixes, state ids, end marks): per key group for
// BatchSink, for the whole restore for SstSink; a damaged section leaves nothing behind.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rocksdb/sst_file_writer.h>
#include <rocksdb/write_batch.h>

#include "db.h"
#include "file_io.h"

namespace stateengine {

struct RestoreStats {
  uint64_t entries = 0;
  uint64_t raw_bytes = 0;
  uint64_t key_groups = 0;
};

// Where decoded entries go.
class RestoreSink {
 public:
  virtual ~RestoreSink() = default;
  virtual rocksdb::Status Put(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value) = 0;
  // A key group decoded completely.
  virtual rocksdb::Status EndKeyGroup() = 0;
  // Every key group decoded: make the data visible.
  virtual rocksdb::Status Finish() = 0;
};

// One write batch per key group: for targets that already hold data.
class BatchSink : public RestoreSink {
 public:
  explicit BatchSink(StateDB* db) : db_(db) {}
  rocksdb::Status Put(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value) override;
  rocksdb::Status EndKeyGroup() override;
  rocksdb::Status Finish() override { return rocksdb::Status::OK(); }

 private:
  StateDB* db_;
  rocksdb::WriteBatch batch_;
};

// SST files per column family (no memtable, flush or compaction work); Finish completes them
// and IngestSstFiles makes them visible. Keys must arrive in ascending order per column family
// (key groups in ascending order).
class SstSink : public RestoreSink {
 public:
  SstSink(StateDB* db, std::string dir) : db_(db), dir_(std::move(dir)) {}
  ~SstSink() override;
  rocksdb::Status Put(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value) override;
  rocksdb::Status EndKeyGroup() override { return rocksdb::Status::OK(); }
  rocksdb::Status Finish() override;
  // Hands the finished files over (by column family); the sink no longer deletes them.
  std::vector<std::vector<std::string>> TakeFiles();

 private:
  struct Column {
    std::unique_ptr<rocksdb::SstFileWriter> writer;
    std::vector<std::string> files;
  };
  rocksdb::Status Roll(int cf, Column* col);
  StateDB* db_;
  std::string dir_;
  std::vector<Column> columns_;
  int next_file_ = 0;
};

// Runs another sink on its own thread: decoding (the caller) and building SST files overlap.
// Entries travel in ~1 MiB blocks; the first error of the inner sink is returned by the next
// Put, EndKeyGroup or Finish.
class ThreadedSink : public RestoreSink {
 public:
  explicit ThreadedSink(std::unique_ptr<RestoreSink> inner);
  ~ThreadedSink() override;
  rocksdb::Status Put(int cf, const rocksdb::Slice& key, const rocksdb::Slice& value) override;
  rocksdb::Status EndKeyGroup() override;
  rocksdb::Status Finish() override;

 private:
  struct Shared;
  rocksdb::Status Ship();
  std::unique_ptr<RestoreSink> inner_;
  std::unique_ptr<Shared> shared_;
  // Entries for the SST thread: bytes [0, used_) of block_, written through a pointer.
  std::string block_;
  size_t used_ = 0;
};

class FullSnapshotReader {
 public:
  rocksdb::Status Open(const std::string& path);
  // Decodes key group kg from the section at offset into sink. cf_for_state[state id] is the
  // target column family index, or -1 to skip that state; a null sink only decodes (nothing
  // is written or counted). With section_end > 0 the section must end exactly there (where
  // the next section begins, or the file ends): the handle's offsets must tile the file.
  rocksdb::Status RestoreKeyGroup(int32_t kg, uint64_t offset, bool compressed, int prefix_bytes,
                                  const std::vector<int>& cf_for_state, RestoreSink* sink,
                                  RestoreStats* stats, uint64_t section_end = 0);
  uint64_t size() const { return in_.size(); }

 private:
  FileReader in_;
  std::string key_, value_;
};

struct SnapshotFile {
  std::string path;
  bool compressed = true;
  std::vector<int> cf_for_state;
};

struct SectionRef {
  int file;
  int32_t key_group;
  uint64_t offset;
  uint64_t end = 0;          // where the section must end (0: not checked)
  bool decode_only = false;  // checked (decoded to its end) but not restored
};

// Restores the listed sections (ascending key groups) from several snapshot files: through SST
// files written under sst_dir and ingested at the end, or, with an empty sst_dir, through one
// write batch per key group.
rocksdb::Status RestoreSections(StateDB* db, int prefix_bytes,
                                const std::vector<SnapshotFile>& files,
                                const std::vector<SectionRef>& sections,
                                const std::string& sst_dir, RestoreStats* stats);

}  // namespace stateengine
