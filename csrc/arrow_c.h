// The Arrow C Data Interface: the two structs through which pyarrow hands arrays to C++ and
// takes them back (pyarrow's Array._export_to_c / _import_from_c) without linking libarrow.
// The layout is a stable ABI fixed by the Arrow specification ("The Arrow C data interface");
// the guard is the one the specification names, so this header coexists with Arrow's own.
#pragma once

#include <cstdint>

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

extern "C" {

struct ArrowSchema {
  const char* format;  // the type, e.g. "l" int64, "u" utf8, "+s" struct, "+l" list
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;
  void (*release)(struct ArrowSchema*);  // null once released
  void* private_data;
};

struct ArrowArray {
  int64_t length;
  int64_t null_count;  // -1 if not computed
  int64_t offset;      // logical offset into every buffer of this array (not its children)
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;  // buffers[0] is the validity bitmap (null if no nulls)
  struct ArrowArray** children;
  struct ArrowArray* dictionary;
  void (*release)(struct ArrowArray*);  // null once released
  void* private_data;
};

}  // extern "C"

#endif  // ARROW_C_DATA_INTERFACE
