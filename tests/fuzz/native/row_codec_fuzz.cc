// libFuzzer harness: the struct codec (csrc/row_codec.cc) and its Arrow decoder and encoder
// (csrc/arrow_rows.cc): schema programs, value validation (RowSchema::Length), decoding
// stored values into Arrow arrays (DecodeSlicesToArrow: plain values, map values with their
// null flag, ','-joined list elements) and encoding Arrow arrays (EncodeArrowRows).
//
// Input: u8 mode | (mode bit 0: u16 program length + a schema program to compile; else a
// schema built from the input's choices) | the rest = one stored value.
// Oracles: the validator and the decoder agree on every value; a value they accept, decoded
// to Arrow and encoded again, gives back exactly its bytes (decoder accepts => encoding is
// canonical); a schema that compiles only references nodes it holds.
#include <cstring>
#include <memory>
#include <vector>

#include "arrow_rows.h"
#include "arrow_type.h"
#include "fuzz_input.h"
#include "row_codec.h"

using namespace stateengine;

namespace {

constexpr uint8_t kScalars[] = {kRowBigint, kRowInt,     kRowSmallint, kRowTinyint,
                                kRowDouble, kRowFloat,   kRowString,   kRowBinary,
                                kRowBoolean, kRowDecimal, kRowDate,    kRowTimestamp,
                                kRowTimestampNtz};

// A schema program (sparktypes.program's layout) from the input's choices; depth-limited.
void Program(fuzz::Input* in, int depth, bool root, std::string* out) {
  uint8_t type;
  const uint8_t pick = in->Byte();
  if (root) {
    type = kRowStruct;
  } else if (depth >= 4 || pick % 8 < 5) {
    type = kScalars[(pick >> 3) % sizeof(kScalars)];
  } else {
    type = static_cast<uint8_t>(kRowArray + pick % 3);
  }
  uint32_t children = type == kRowArray ? 1 : type == kRowMap ? 2 : 0;
  if (type == kRowStruct) children = 1 + in->Below(4);
  uint8_t precision = 0, scale = 0;
  if (type == kRowDecimal) {
    precision = static_cast<uint8_t>(1 + in->Below(38));
    scale = static_cast<uint8_t>(in->Below(precision + 1u));
  }
  out->push_back(static_cast<char>(type));
  out->push_back(static_cast<char>(in->Bit()));  // nullable
  out->push_back(static_cast<char>(precision));
  out->push_back(static_cast<char>(scale));
  for (int i = 3; i >= 0; --i) out->push_back(static_cast<char>((children >> (8 * i)) & 0xFF));
  for (uint32_t c = 0; c < children; ++c) Program(in, depth + 1, false, out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input input(data, size);
  const uint8_t mode = input.Byte();
  std::string program;
  if (mode & 1) {
    const size_t plen = (static_cast<size_t>(input.Byte()) << 8) | input.Byte();
    program = input.Bytes(plen);
  } else {
    Program(&input, 0, true, &program);
  }
  RowSchema schema;
  if (!schema.Compile(program.data(), program.size())) return 0;
  for (size_t i = 0; i < schema.size(); ++i) {
    const RowNode& n = schema.node(static_cast<uint32_t>(i));
    for (uint32_t c = 0; c < n.num_children; ++c) FUZZ_CHECK(schema.child(n, c) < schema.size());
  }
  const std::string value = input.Rest();
  size_t len = 0;
  const bool valid = schema.Length(0, value.data(), value.size(), &len);
  if (valid) FUZZ_CHECK(len <= value.size());
  const std::string one = valid ? value.substr(0, len) : value;

  // the decoder agrees with the validator, on the value and on the value as a map value
  std::vector<rocksdb::Slice> slices{rocksdb::Slice(one)};
  ArrowArray out{};
  RowError err;
  const bool decoded = DecodeSlicesToArrow(schema, nullptr, slices, kStoredValue, &out, &err);
  FUZZ_CHECK(decoded == valid);
  const std::string flagged = std::string(1, '\0') + one;
  std::vector<rocksdb::Slice> map_values{rocksdb::Slice(flagged), rocksdb::Slice("\x01", 1)};
  ArrowArray map_out{};
  RowError map_err;
  FUZZ_CHECK(DecodeSlicesToArrow(schema, nullptr, map_values, kStoredMapValue, &map_out, &map_err) == valid);
  if (valid) map_out.release(&map_out);
  // list layout: elements joined by ','; whatever it accepts is released cleanly
  ArrowArray list_out{};
  RowError list_err;
  if (DecodeSlicesToArrow(schema, nullptr, {rocksdb::Slice(value)}, kStoredList, &list_out, &list_err)) {
    list_out.release(&list_out);
  }
  if (!decoded) return 0;

  // canonical: encoding what was decoded gives back the same bytes
  std::unique_ptr<fuzz::Type> type = fuzz::ArrowType(schema, 0);
  fuzz::Link(type.get());
  std::string encoded;
  std::vector<int64_t> offsets;
  std::vector<uint8_t> nulls;
  RowError enc_err;
  const bool encoded_ok =
      EncodeArrowRows(schema, &type->schema, &out, kNullRowsRefuse, std::string(), &encoded,
                      &offsets, &nulls, &enc_err);
  out.release(&out);
  FUZZ_CHECK(encoded_ok);
  FUZZ_CHECK(encoded == one);
  return 0;
}
