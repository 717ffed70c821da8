#include "scratch_fs.h"

#include <memory>

#include <rocksdb/file_system.h>

namespace stateengine {
namespace {

class NoSyncWritableFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  using FSWritableFileOwnerWrapper::FSWritableFileOwnerWrapper;
  rocksdb::IOStatus Sync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus RangeSync(uint64_t, uint64_t, const rocksdb::IOOptions&,
                              rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
  // Syncing is what a caller would wait for; there is nothing to wait for.
  bool IsSyncThreadSafe() const override { return true; }
};

class NoSyncDirectory : public rocksdb::FSDirectoryWrapper {
 public:
  using FSDirectoryWrapper::FSDirectoryWrapper;
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus FsyncWithDirOptions(const rocksdb::IOOptions&, rocksdb::IODebugContext*,
                                        const rocksdb::DirFsyncOptions&) override {
    return rocksdb::IOStatus::OK();
  }
};

class ScratchFileSystem : public rocksdb::FileSystemWrapper {
 public:
  using FileSystemWrapper::FileSystemWrapper;
  const char* Name() const override { return "StateengineScratchFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    return Wrap(target()->NewWritableFile(f, o, r, dbg), r);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* dbg) override {
    return Wrap(target()->ReopenWritableFile(f, o, r, dbg), r);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* dbg) override {
    return Wrap(target()->ReuseWritableFile(f, old, o, r, dbg), r);
  }
  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& io,
                                 std::unique_ptr<rocksdb::FSDirectory>* r,
                                 rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewDirectory(name, io, r, dbg);
    if (s.ok()) r->reset(new NoSyncDirectory(std::move(*r)));
    return s;
  }

 private:
  static rocksdb::IOStatus Wrap(rocksdb::IOStatus s, std::unique_ptr<rocksdb::FSWritableFile>* r) {
    if (s.ok()) r->reset(new NoSyncWritableFile(std::move(*r)));
    return s;
  }
};

}  // namespace

rocksdb::Env* ScratchEnv() {
  // Never destroyed: databases may be closed during static destruction.
  static rocksdb::Env* env =
      rocksdb::NewCompositeEnv(std::make_shared<ScratchFileSystem>(rocksdb::FileSystem::Default()))
          .release();
  return env;
}

}  // namespace stateengine
