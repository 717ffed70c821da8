// Batch writes walk a batch in key order while the caller's columns are in input order. A
// composite key starts with its key group, a hash, so key order is a random permutation of
// the rows: past a few MB of column, every row is a cache miss. Asking for the row a few
// steps ahead lets those misses overlap instead of stalling one after another (put_many of 2M
// struct rows: ~78% of its copy time sat on the load of the value's bytes).
#pragma once

#include <cstddef>

namespace stateengine {

// Rows ahead whose bytes are requested; their offsets (a second, dependent miss) twice as far.
constexpr size_t kPrefetchRows = 8;

// Always inlined, and so must be every function that only prefetches: GCC deems such a
// function free of side effects and deletes the calls to it (GCC 12, -O1 and up).
#define STATEENGINE_PREFETCHES inline __attribute__((always_inline))

STATEENGINE_PREFETCHES void Prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }

}  // namespace stateengine
