// RocksDB keys of keyed state, in Flink's layout:
//   [key-group prefix][key][namespace](+ [user key] for map state)
// When both key and namespace encodings are variable-length, each is followed by its length
// (Flink's "ambiguous key" rule: little-endian bytes until the value runs out).
// Invariant: SetKey serializes [kg][key] once; building a state's key truncates back to that
// prefix and appends only the suffix, so the per-access path never allocates.
#pragma once

#include <cstdint>
#include <string>

#include "codec.h"

namespace stateengine {

bool IsVariableLengthCodec(Codec codec);

// Flink's writeVariableIntBytes: value bytes LSB first, at least one byte.
inline void PutLengthSuffix(std::string* out, uint32_t len) {
  do {
    out->push_back(static_cast<char>(len & 0xFF));
    len >>= 8;
  } while (len != 0);
}
inline size_t LengthSuffixSize(uint32_t len) {
  size_t n = 0;
  do {
    ++n;
    len >>= 8;
  } while (len != 0);
  return n;
}

class CompositeKeyBuilder {
 public:
  CompositeKeyBuilder(int prefix_bytes, bool key_variable);

  // Caches [kg][key] for the current key.
  void SetKey(int32_t key_group, const char* key, size_t key_len);
  bool has_key() const { return has_key_; }
  int32_t key_group() const { return key_group_; }
  const char* key_data() const { return buf_.data() + prefix_bytes_; }
  size_t key_size() const { return key_len_; }

  // [kg][key][ns] (with length suffixes when ambiguous). The reference is valid until the
  // next call on this builder.
  const std::string& Build(const std::string& ns, bool ns_variable);
  // [kg][key][ns][user key]
  const std::string& BuildWithUserKey(const std::string& ns, bool ns_variable, const char* uk,
                                      size_t uk_len);
  // Timer key [kg][timestamp, sign bit flipped, big-endian][key][ns].
  void BuildTimerKey(int64_t timestamp, const std::string& ns, bool ns_variable,
                     std::string* out) const;

  int prefix_bytes() const { return prefix_bytes_; }

 private:
  void AppendNamespace(const std::string& ns, bool ns_variable);

  const int prefix_bytes_;
  const bool key_variable_;
  bool has_key_ = false;
  int32_t key_group_ = -1;
  size_t key_len_ = 0;
  std::string buf_;
};

// Where the parts of a composite key lie. Offsets are into the parsed bytes.
struct ParsedKey {
  int32_t key_group = 0;
  size_t key_off = 0, key_len = 0;
  size_t ns_off = 0, ns_len = 0;
  size_t user_key_off = 0, user_key_len = 0;
};

// Splits a state key; has_user_key for map states. False if the bytes do not fit the schema.
bool ParseStateKey(const char* p, size_t n, int prefix_bytes, const KeySchema& schema,
                   Codec ns_codec, bool has_user_key, ParsedKey* out);
// Splits a timer key; the namespace of timers is always encoded with kAny.
bool ParseTimerKey(const char* p, size_t n, int prefix_bytes, const KeySchema& schema,
                   int64_t* timestamp, ParsedKey* out);

}  // namespace stateengine
