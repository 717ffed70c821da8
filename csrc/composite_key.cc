#include "composite_key.h"

#include "keygroups.h"

namespace stateengine {

bool IsVariableLengthCodec(Codec codec) {
  switch (codec) {
    case kAny:
    case kStr:
    case kBytes:
    case kPickle:
    case kOrdStr:
    case kOrdBytes:
      return true;
    default:
      return false;
  }
}

CompositeKeyBuilder::CompositeKeyBuilder(int prefix_bytes, bool key_variable)
    : prefix_bytes_(prefix_bytes), key_variable_(key_variable) {
  buf_.reserve(128);
}

void CompositeKeyBuilder::SetKey(int32_t key_group, const char* key, size_t key_len) {
  buf_.resize(prefix_bytes_);
  WriteKeyGroupPrefix(key_group, prefix_bytes_, &buf_[0]);
  buf_.append(key, key_len);
  key_group_ = key_group;
  key_len_ = key_len;
  has_key_ = true;
}

void CompositeKeyBuilder::AppendNamespace(const std::string& ns, bool ns_variable) {
  const bool ambiguous = key_variable_ && ns_variable;
  if (ambiguous) PutLengthSuffix(&buf_, static_cast<uint32_t>(key_len_));
  buf_.append(ns);
  if (ambiguous) PutLengthSuffix(&buf_, static_cast<uint32_t>(ns.size()));
}

const std::string& CompositeKeyBuilder::Build(const std::string& ns, bool ns_variable) {
  buf_.resize(prefix_bytes_ + key_len_);
  AppendNamespace(ns, ns_variable);
  return buf_;
}

const std::string& CompositeKeyBuilder::BuildWithUserKey(const std::string& ns, bool ns_variable,
                                                         const char* uk, size_t uk_len) {
  buf_.resize(prefix_bytes_ + key_len_);
  AppendNamespace(ns, ns_variable);
  buf_.append(uk, uk_len);
  return buf_;
}

void CompositeKeyBuilder::BuildTimerKey(int64_t timestamp, const std::string& ns,
                                        bool ns_variable, std::string* out) const {
  out->assign(buf_.data(), prefix_bytes_);
  PutBE64(out, OrderedI64(timestamp));
  out->append(buf_.data() + prefix_bytes_, key_len_);
  const bool ambiguous = key_variable_ && ns_variable;
  if (ambiguous) PutLengthSuffix(out, static_cast<uint32_t>(key_len_));
  out->append(ns);
  if (ambiguous) PutLengthSuffix(out, static_cast<uint32_t>(ns.size()));
}

namespace {

// Whether the length suffix at p (n bytes available) is the one PutLengthSuffix writes for
// len: a suffix that merely has the right size would let two byte strings name one entry.
bool SuffixIs(const char* p, size_t n, uint32_t len) {
  size_t i = 0;
  do {
    if (i >= n || static_cast<unsigned char>(p[i]) != (len & 0xFF)) return false;
    ++i;
    len >>= 8;
  } while (len != 0);
  return true;
}

// Parses [key](len)[ns](len) starting at pos; leaves pos after the namespace part.
bool ParseKeyAndNamespace(const char* p, size_t n, size_t* pos, const KeySchema& schema,
                          Codec ns_codec, ParsedKey* out) {
  const bool ambiguous = schema.variable_length() && IsVariableLengthCodec(ns_codec);
  size_t key_len;
  if (!schema.Length(p + *pos, n - *pos, &key_len)) return false;
  out->key_off = *pos;
  out->key_len = key_len;
  *pos += key_len;
  if (ambiguous) {
    if (!SuffixIs(p + *pos, n - *pos, static_cast<uint32_t>(key_len))) return false;
    *pos += LengthSuffixSize(static_cast<uint32_t>(key_len));
  }
  size_t ns_len;
  if (!ElementLength(ns_codec, p + *pos, n - *pos, &ns_len)) return false;
  out->ns_off = *pos;
  out->ns_len = ns_len;
  *pos += ns_len;
  if (ambiguous) {
    if (!SuffixIs(p + *pos, n - *pos, static_cast<uint32_t>(ns_len))) return false;
    *pos += LengthSuffixSize(static_cast<uint32_t>(ns_len));
  }
  return true;
}

}  // namespace

bool ParseStateKey(const char* p, size_t n, int prefix_bytes, const KeySchema& schema,
                   Codec ns_codec, bool has_user_key, ParsedKey* out) {
  if (n < static_cast<size_t>(prefix_bytes)) return false;
  out->key_group = ReadKeyGroupPrefix(p, prefix_bytes);
  size_t pos = prefix_bytes;
  if (!ParseKeyAndNamespace(p, n, &pos, schema, ns_codec, out)) return false;
  out->user_key_off = pos;
  out->user_key_len = n - pos;
  return has_user_key || pos == n;
}

bool ParseTimerKey(const char* p, size_t n, int prefix_bytes, const KeySchema& schema,
                   int64_t* timestamp, ParsedKey* out) {
  if (n < static_cast<size_t>(prefix_bytes) + 8) return false;
  out->key_group = ReadKeyGroupPrefix(p, prefix_bytes);
  *timestamp = FromOrderedI64(GetBE64(p + prefix_bytes));
  size_t pos = prefix_bytes + 8;
  if (!ParseKeyAndNamespace(p, n, &pos, schema, kAny, out)) return false;
  return pos == n;
}

}  // namespace stateengine
