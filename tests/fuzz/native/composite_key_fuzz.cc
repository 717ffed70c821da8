// libFuzzer harness: RocksDB keys of keyed state and of timers (csrc/composite_key.cc):
// ParseStateKey and ParseTimerKey under a key schema, namespace codec and key-group prefix
// chosen by the input, with Flink's length suffixes where key and namespace are both
// variable-length.
//
// Input: u8 layout (prefix bytes, user key, timer) | u8 namespace codec | u8 key columns |
// rest = the key.
// Oracle: a key that parses is exactly the key CompositeKeyBuilder builds from its parts
// (same bytes: a parser that accepts what no writer produces would let two byte strings name
// one state entry).
#include <vector>

#include "composite_key.h"
#include "fuzz_input.h"
#include "keygroups.h"

using namespace stateengine;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input input(data, size);
  const uint8_t layout = input.Byte();
  const int prefix = (layout & 1) ? 2 : 1;
  const bool user_key = layout & 2;
  const bool timer = layout & 4;
  static const Codec kNs[] = {kVoid, kAny, kI64, kStr, kBytes, kBool, kI32, kF64, kStruct};
  const Codec ns_codec = kNs[input.Below(9)];
  const uint8_t cols = input.Byte();
  static const Codec kKeyCodecs[] = {kI64, kI32, kF64, kF32, kBool, kStr, kBytes};
  std::vector<Codec> schema_cols;
  for (int i = 0; i < 1 + (cols & 1); ++i) schema_cols.push_back(kKeyCodecs[(cols >> (1 + 3 * i)) % 7]);
  KeySchema schema(schema_cols);
  const std::string raw = input.Rest();

  ParsedKey pk;
  CompositeKeyBuilder builder(prefix, schema.variable_length());
  if (timer) {
    int64_t ts = 0;
    if (!ParseTimerKey(raw.data(), raw.size(), prefix, schema, &ts, &pk)) return 0;
    FUZZ_CHECK(pk.key_off + pk.key_len <= raw.size() && pk.ns_off + pk.ns_len <= raw.size());
    builder.SetKey(pk.key_group, raw.data() + pk.key_off, pk.key_len);
    std::string rebuilt;
    builder.BuildTimerKey(ts, raw.substr(pk.ns_off, pk.ns_len), IsVariableLengthCodec(kAny),
                          &rebuilt);
    FUZZ_CHECK(rebuilt == raw);
    return 0;
  }
  if (!ParseStateKey(raw.data(), raw.size(), prefix, schema, ns_codec, user_key, &pk)) return 0;
  FUZZ_CHECK(pk.key_off + pk.key_len <= raw.size() && pk.ns_off + pk.ns_len <= raw.size());
  FUZZ_CHECK(pk.user_key_off <= raw.size() && pk.user_key_off + pk.user_key_len == raw.size());
  FUZZ_CHECK(user_key || pk.user_key_len == 0);
  builder.SetKey(pk.key_group, raw.data() + pk.key_off, pk.key_len);
  const std::string ns = raw.substr(pk.ns_off, pk.ns_len);
  const std::string& rebuilt =
      user_key ? builder.BuildWithUserKey(ns, IsVariableLengthCodec(ns_codec),
                                          raw.data() + pk.user_key_off, pk.user_key_len)
               : builder.Build(ns, IsVariableLengthCodec(ns_codec));
  FUZZ_CHECK(rebuilt == raw);
  return 0;
}
