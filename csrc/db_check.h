// Reading a RocksDB directory that came from a checkpoint, before the process that restores
// it opens it. RocksDB trusts its own files: a MANIFEST or SST whose bytes were changed before
// their CRCs were computed passes every checksum, and then an assertion (Debian's librocksdb
// keeps them) or an out-of-range read ends the process. CheckDbDirectory does, in a child
// process (stateengine/checkpoint/untrusted.py), what parses those files: the MANIFEST replay
// of an open (with RocksDB's consistency checks), the opening of every live table (footer,
// index, filter, properties, range deletions), and, for each table not already checked, every
// block's checksum and every entry, in order and inside the key range the MANIFEST gives it.
// Whatever kills the child is reported by the parent as corruption.
// Invariant: the directory is only read (read-only open, no LOG file, no new MANIFEST).
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include <rocksdb/status.h>

namespace stateengine {

struct DbCheckStats {
  size_t column_families = 0;
  size_t files = 0;    // live table files
  size_t scanned = 0;  // of them, read entry by entry (the others were trusted)
  size_t entries = 0;
  uint64_t open_us = 0, scan_us = 0;  // wall time of the open and of the table reads
};

// trusted: names of table files (as the MANIFEST lists them, e.g. "000012.sst") whose
// entries need no reading: the caller checked these very files before.
rocksdb::Status CheckDbDirectory(const std::string& path, const std::set<std::string>& trusted,
                                 DbCheckStats* stats);

}  // namespace stateengine

// The child's entry point, called through ctypes with the native module loaded as a plain
// shared library (no Python module init: no numpy, no package import). trusted holds table
// file names separated by '\n'. Writes a NUL-terminated message into msg: the error, or
// "ok <column families> <files> <scanned> <entries> <open us> <scan us>". Returns 0 if the
// directory reads cleanly, 1 if RocksDB reported it damaged, 3 for an I/O error, 2 for any
// other error.
extern "C" __attribute__((visibility("default"))) int stateengine_check_db(const char* path,
                                                                           const char* trusted,
                                                                           char* msg,
                                                                           size_t msg_len);
