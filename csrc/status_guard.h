// The Cython line is crossed by statuses only: an exception escaping into the bindings (or
// out of a thread) would abort the process. Entry points whose allocations grow with their
// input or with stored data run their body through GuardStatus, which turns std::bad_alloc
// (and any other std::exception) into a status that the bindings raise as an error.
#pragma once

#include <exception>
#include <new>
#include <string>

#include <rocksdb/status.h>

namespace stateengine {

template <typename Body>
rocksdb::Status GuardStatus(const char* what, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return rocksdb::Status::MemoryLimit(std::string("out of memory while ") + what);
  } catch (const std::exception& e) {
    return rocksdb::Status::Aborted(std::string(what) + " failed: " + e.what());
  } catch (...) {
    return rocksdb::Status::Aborted(std::string(what) + " failed");
  }
}

}  // namespace stateengine
