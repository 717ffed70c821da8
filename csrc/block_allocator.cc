#include "block_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <new>

#include <sys/mman.h>

namespace stateengine {

SlabBlockAllocator::~SlabBlockAllocator() {
  for (auto& entry : slabs_) munmap(entry.second->base, kSlabBytes);
}

SlabBlockAllocator::Slab* SlabBlockAllocator::NewSlab(size_t cls) {
  // Map twice the size and keep the aligned middle, so a slot's slab is found by masking.
  void* raw = mmap(nullptr, 2 * kSlabBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kSlabBytes - 1) & ~(uintptr_t{kSlabBytes} - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + 2 * kSlabBytes;
  if (end > aligned + kSlabBytes) {
    munmap(reinterpret_cast<void*>(aligned + kSlabBytes), end - aligned - kSlabBytes);
  }
  auto slab = std::make_unique<Slab>();
  slab->base = reinterpret_cast<char*>(aligned);
  slab->slot_size = cls * kClassBytes;
  slab->slots = static_cast<uint32_t>(kSlabBytes / slab->slot_size);
  slab->clean.reserve(slab->slots);
  for (uint32_t i = slab->slots; i > 0; --i) slab->clean.push_back(static_cast<uint16_t>(i - 1));
  Slab* s = slab.get();
  slabs_.emplace(aligned, std::move(slab));
  slabs_per_class_[cls]++;
  slabs_mapped_++;
  return s;
}

void SlabBlockAllocator::ReleaseSlab(Slab* slab) {
  const size_t cls = slab->slot_size / kClassBytes;
  auto& list = partial_[cls];
  list.erase(std::remove(list.begin(), list.end(), slab), list.end());
  slabs_per_class_[cls]--;
  dirty_bytes_ -= slab->dirty.size() * slab->slot_size;
  char* base = slab->base;
  slabs_.erase(reinterpret_cast<uintptr_t>(base));
  munmap(base, kSlabBytes);
}

SlabBlockAllocator::Slab* SlabBlockAllocator::Find(const void* p) const {
  const uintptr_t base = reinterpret_cast<uintptr_t>(p) & ~(uintptr_t{kSlabBytes} - 1);
  auto it = slabs_.find(base);
  return it == slabs_.end() ? nullptr : it->second.get();
}

void* SlabBlockAllocator::Allocate(size_t size) {
  if (size == 0 || size > kMaxSlot) return std::malloc(size == 0 ? 1 : size);
  const size_t cls = ClassOf(size);
  std::lock_guard<std::mutex> lock(mu_);
  if (partial_.size() <= cls) {
    partial_.resize(cls + 1);
    slabs_per_class_.resize(cls + 1, 0);
    spare_.resize(cls + 1, nullptr);
  }
  auto& list = partial_[cls];
  if (list.empty()) {
    Slab* s = NewSlab(cls);
    if (s == nullptr) return std::malloc(size);  // out of address space: fall back
    list.push_back(s);
  }
  Slab* s = list.back();
  if (s == spare_[cls]) spare_[cls] = nullptr;  // in use again
  uint16_t slot;
  if (!s->dirty.empty()) {
    slot = s->dirty.back();
    s->dirty.pop_back();
    dirty_bytes_ -= s->slot_size;
  } else {
    slot = s->clean.back();
    s->clean.pop_back();
  }
  if (s->free_count() == 0) list.pop_back();
  live_bytes_ += s->slot_size;
  return s->base + static_cast<size_t>(slot) * s->slot_size;
}

void SlabBlockAllocator::Deallocate(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  Slab* s = Find(p);
  if (s == nullptr) {
    std::free(p);
    return;
  }
  const size_t cls = s->slot_size / kClassBytes;
  const auto slot = static_cast<uint16_t>((static_cast<char*>(p) - s->base) / s->slot_size);
  live_bytes_ -= s->slot_size;
  if (s->free_count() == 0) partial_[cls].push_back(s);
  s->dirty.push_back(slot);
  dirty_bytes_ += s->slot_size;
  if (s->free_count() == s->slots) {
    if (spare_[cls] == nullptr) {
      spare_[cls] = s;  // stays in partial_, its slots dirty: the next block reuses them
    } else {
      ReleaseSlab(s);
    }
  }
  if (dirty_bytes_ > kDirtyLimit) ReturnDirtyPages();
}

void SlabBlockAllocator::ReturnDirtyPages() {
  for (auto& entry : slabs_) {
    Slab* s = entry.second.get();
    for (uint16_t slot : s->dirty) {
      madvise(s->base + static_cast<size_t>(slot) * s->slot_size, s->slot_size, MADV_DONTNEED);
      s->clean.push_back(slot);
    }
    s->dirty.clear();
  }
  dirty_bytes_ = 0;
}

size_t SlabBlockAllocator::UsableSize(void* p, size_t allocation_size) const {
  if (allocation_size == 0 || allocation_size > kMaxSlot) return allocation_size;
  std::lock_guard<std::mutex> lock(mu_);
  const Slab* s = Find(p);
  return s == nullptr ? allocation_size : s->slot_size;
}

size_t SlabBlockAllocator::slabs_mapped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slabs_mapped_;
}

size_t SlabBlockAllocator::live_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_bytes_;
}

}  // namespace stateengine
