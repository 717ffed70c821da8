// Memory for RocksDB's block cache in its own page-aligned slabs, apart from the process heap.
// Invariant: every slot of a slab has the slab's size class (a multiple of 4 KiB), so a freed
// slot fits any later block of that class; freed slots are reused first while still resident
// and go back to the kernel (slots are whole pages) once more than kDirtyLimit of them pile up;
// a slab whose slots are all free is unmapped, except one such slab per class kept as a spare
// (blocks read past the cache, as scans and copies read them, are allocated and freed one at a
// time: without a spare each would map a new slab, fault its pages in and unmap it again); the
// cache is charged each block's class size. So resident memory stays within kDirtyLimit of the
// cached blocks, whatever else the process allocates and however eviction scatters over the
// slabs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <rocksdb/memory_allocator.h>

namespace stateengine {

class SlabBlockAllocator : public rocksdb::MemoryAllocator {
 public:
  static constexpr size_t kPage = 4096;
  static constexpr size_t kClassBytes = 4096;  // page-sized classes: few classes, reusable holes
  static constexpr size_t kSlabBytes = 1 << 20;
  static constexpr size_t kMaxSlot = 64 << 10;  // larger blocks (big filters) use malloc
  static constexpr size_t kDirtyLimit = 4 << 20;

  SlabBlockAllocator() = default;
  ~SlabBlockAllocator() override;
  const char* Name() const override { return "stateengine.SlabBlockAllocator"; }
  void* Allocate(size_t size) override;
  void Deallocate(void* p) override;
  size_t UsableSize(void* p, size_t allocation_size) const override;

  // Bytes of slots holding blocks now: the resident memory of the cached blocks.
  size_t live_bytes() const;
  // Slabs mapped since the allocator was made (tests: reads past the cache reuse a spare).
  size_t slabs_mapped() const;

 private:
  struct Slab {
    char* base;
    size_t slot_size;
    std::vector<uint16_t> dirty;  // free, pages still resident: reused first
    std::vector<uint16_t> clean;  // free, pages returned to the kernel
    uint32_t slots;
    size_t free_count() const { return dirty.size() + clean.size(); }
  };
  static size_t ClassOf(size_t size) { return (size + kClassBytes - 1) / kClassBytes; }
  Slab* NewSlab(size_t cls);
  void ReleaseSlab(Slab* slab);
  Slab* Find(const void* p) const;
  void ReturnDirtyPages();

  mutable std::mutex mu_;
  std::unordered_map<uintptr_t, std::unique_ptr<Slab>> slabs_;  // by slab base address
  std::vector<std::vector<Slab*>> partial_;                     // slabs with free slots
  std::vector<size_t> slabs_per_class_;
  std::vector<Slab*> spare_;  // per class: a slab with every slot free, kept mapped
  size_t live_bytes_ = 0;
  size_t dirty_bytes_ = 0;
  size_t slabs_mapped_ = 0;
};

}  // namespace stateengine
