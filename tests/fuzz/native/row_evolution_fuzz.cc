// libFuzzer harness: schema evolution's reader (csrc/row_evolution.cc): a schema history as
// RowVersions::Build compiles it (every version's program, the escape, the written version,
// each old version's upgrade plan checked against its schema and the current one), and
// stored values read through it (version markers, old values validated and transcoded).
//
// Input: u16 spec length | spec (evolution.History.spec's layout) | u8 whole | the rest = one
// stored value.
// Oracles:
// - a value Read upgrades is, once transcoded, a valid encoding of the current schema taking
//   all its bytes, and Length agrees with Read on where the stored value ends;
// - a value of a direct version that its version's schema accepts, the current schema
//   accepts too, with the same length (a direct version is read as current bytes);
// - an unmarked value of version 0 is classified as version 0 (no encoding of version 0
//   begins with the escape);
// - a value of the current schema, written after write_prefix(), reads back unchanged as a
//   direct version whose marker is that prefix;
// - the batch path (arrow_rows.cc's DecodeSlicesToArrow given the versions, as a value and as
//   a map value) accepts a whole value exactly when Read does and its current bytes are
//   valid, and what it decodes, encoded again with the written marker (EncodeArrowRows),
//   is write_prefix() + those current bytes.
#include <string>
#include <vector>

#include "arrow_rows.h"
#include "arrow_type.h"
#include "fuzz_input.h"
#include "row_evolution.h"

using namespace stateengine;

namespace {

bool Whole(const RowSchema& schema, const char* p, size_t n) {
  size_t len = 0;
  return schema.Length(0, p, n, &len) && len == n;
}

// The batch decoder of stored values and map values against Read, and back through the
// batch encoder; a list of ','-joined elements it accepts is released cleanly.
void BatchPath(const RowVersions& versions, const std::string& value) {
  const RowSchema& now = versions.current();
  std::string scratch;
  size_t marker = 0, old_len = 0;
  bool upgraded = false;
  const bool read = versions.Read(value.data(), value.size(), true, &scratch, &marker,
                                  &upgraded, &old_len);
  const std::string current = !read ? "" : upgraded ? scratch : value.substr(marker);
  const bool valid = read && Whole(now, current.data(), current.size());
  const std::string flagged = std::string(1, '\0') + value;
  for (const auto& [layout, slices] :
       {std::pair<int, std::vector<rocksdb::Slice>>{kStoredValue, {rocksdb::Slice(value)}},
        {kStoredMapValue, {rocksdb::Slice(flagged), rocksdb::Slice("\x01", 1)}}}) {
    ArrowArray out{};
    RowError err;
    const bool decoded = DecodeSlicesToArrow(now, &versions, slices, layout, &out, &err);
    FUZZ_CHECK(decoded == valid);
    if (!decoded) continue;
    if (layout == kStoredMapValue) {
      FUZZ_CHECK(out.length == 2 && out.null_count == 1);
      out.release(&out);
      continue;
    }
    std::unique_ptr<fuzz::Type> type = fuzz::ArrowType(now, 0);
    fuzz::Link(type.get());
    std::string encoded;
    std::vector<int64_t> offsets;
    std::vector<uint8_t> nulls;
    RowError enc_err;
    const bool ok = EncodeArrowRows(now, &type->schema, &out, kNullRowsRefuse,
                                    versions.write_prefix(), &encoded, &offsets, &nulls,
                                    &enc_err);
    out.release(&out);
    FUZZ_CHECK(ok && encoded == versions.write_prefix() + current);
  }
  ArrowArray list{};
  RowError list_err;
  if (DecodeSlicesToArrow(now, &versions, {rocksdb::Slice(value)}, kStoredList, &list,
                          &list_err)) {
    list.release(&list);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const size_t n = (static_cast<size_t>(in.Byte()) << 8) | in.Byte();
  const std::string spec = in.Bytes(n);
  RowVersions versions;
  if (!versions.Build(spec.data(), spec.size())) return 0;
  const bool whole = in.Bit();
  const std::string value = in.Rest();
  const char* p = value.data();
  std::string scratch;
  size_t marker = 0, old_len = 0, length = 0;
  bool upgraded = false;
  uint32_t version = 0;

  if (Whole(versions.schema(0), p, value.size())) {
    FUZZ_CHECK(versions.Classify(p, value.size(), &version, &marker) && version == 0 &&
               marker == 0);
  }
  if (Whole(versions.current(), p, value.size())) {
    const std::string written = versions.write_prefix() + value;
    FUZZ_CHECK(versions.Read(written.data(), written.size(), true, &scratch, &marker,
                             &upgraded, &old_len));
    FUZZ_CHECK(!upgraded && marker == versions.write_prefix().size());
  }

  BatchPath(versions, value);

  if (!versions.Read(p, value.size(), whole, &scratch, &marker, &upgraded, &old_len)) return 0;
  size_t marker2 = 0;
  FUZZ_CHECK(versions.Classify(p, value.size(), &version, &marker2) && marker2 == marker);
  if (upgraded) {
    FUZZ_CHECK(!versions.direct(version));
    FUZZ_CHECK(Whole(versions.current(), scratch.data(), scratch.size()));
    FUZZ_CHECK(versions.Length(p, value.size(), &length) && length == marker + old_len);
    FUZZ_CHECK(!whole || length == value.size());
  } else {
    FUZZ_CHECK(versions.direct(version));
    size_t old = 0, now = 0;
    if (versions.schema(version).Length(0, p + marker, value.size() - marker, &old)) {
      FUZZ_CHECK(versions.current().Length(0, p + marker, value.size() - marker, &now) &&
                 now == old);
    }
  }
  return 0;
}
