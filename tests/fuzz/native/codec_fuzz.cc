// libFuzzer harness: the codecs' length checks and number reads (csrc/codec.cc): the tagged
// ANY codec (containers, big ints, nesting limit) and every other codec id, key schemas of one
// to four columns (KeySchema::Length and Hash, the scalar path's hash).
//
// Input: u8 codec | u8 key columns | rest = bytes to measure.
// Oracles: an accepted element lies within the bytes given, is accepted again with the same
// length when cut to that length or followed by other bytes (self-delimiting); a number read
// from its bytes writes back to the same bytes; a key schema accepts exactly the keys whose
// columns it accepts one after the other, and hashes every key it accepts.
#include <vector>

#include "codec.h"
#include "fuzz_input.h"

using namespace stateengine;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input input(data, size);
  const Codec codec = static_cast<Codec>(input.Below(kCodecCount + 1));  // one unknown id too
  const uint8_t cols = input.Byte();
  const std::string bytes = input.Rest();
  const char* p = bytes.data();
  const size_t n = bytes.size();

  size_t len = 0;
  if (ElementLength(codec, p, n, &len)) {
    FUZZ_CHECK(len <= n);
    const bool delimited = codec != kOrdStr && codec != kOrdBytes;
    if (delimited) {
      size_t again = 0;
      FUZZ_CHECK(ElementLength(codec, p, len, &again) && again == len);
      const std::string longer = bytes.substr(0, len) + "\x01\x02\x03";
      FUZZ_CHECK(ElementLength(codec, longer.data(), longer.size(), &again) && again == len);
    }
    Number num;
    if (ReadNumber(codec, p, len, &num)) {
      std::string out;
      WriteNumber(codec, num, &out);
      FUZZ_CHECK(out == bytes.substr(0, len));
    }
  }

  // a key schema of 1..4 columns of the key codecs
  static const Codec kKeyCodecs[] = {kI64, kI32, kF64, kF32, kBool, kStr, kBytes};
  std::vector<Codec> schema_cols;
  for (int i = 0; i < 1 + (cols & 3); ++i) schema_cols.push_back(kKeyCodecs[(cols >> (2 + i)) % 7]);
  KeySchema schema(schema_cols);
  size_t key_len = 0;
  const bool ok = schema.Length(p, n, &key_len);
  size_t pos = 0;
  bool each = true;
  for (Codec c : schema_cols) {
    size_t col = 0;
    if (!ElementLength(c, p + pos, n - pos, &col)) {
      each = false;
      break;
    }
    pos += col;
  }
  FUZZ_CHECK(ok == each);
  if (ok) {
    FUZZ_CHECK(key_len == pos && key_len <= n);
    int32_t h = 0;
    FUZZ_CHECK(schema.Hash(p, key_len, &h));
    FUZZ_CHECK(key_len == n || !schema.Hash(p, n, &h));
  }
  return 0;
}
