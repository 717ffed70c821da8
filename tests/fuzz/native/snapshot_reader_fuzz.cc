// libFuzzer harness: the key-group sections of full snapshots (csrc/snapshot_reader.cc) and
// their snappy framing (csrc/snappy_frame.cc).
//
// Input: u8 flags (bit 0 compressed, bit 1 two-byte key-group prefix, bit 2 structured) |
// u8 states | u16 key group | rest. Unstructured, the rest is a section file decoded from
// offset 0; structured, the rest describes entries that are encoded as the writer lays them
// out (FramedWriter, state runs, end marks) and decoded back.
// Oracles: a decoded section holds only entries of its key group and of known states, and
// encoding what was decoded and decoding that again gives the same entries (round trip); a
// structured input decodes to exactly its entries.
#include <cstring>
#include <vector>

#include "file_io.h"
#include "fuzz_input.h"
#include "keygroups.h"
#include "snappy_frame.h"
#include "snapshot_reader.h"
#include "snapshot_writer.h"

using namespace stateengine;

namespace {

struct Entry {
  int state;
  std::string key, value;
  bool operator==(const Entry& o) const {
    return state == o.state && key == o.key && value == o.value;
  }
};

class CollectSink : public RestoreSink {
 public:
  std::vector<Entry> entries;
  rocksdb::Status Put(int cf, const rocksdb::Slice& k, const rocksdb::Slice& v) override {
    entries.push_back({cf, k.ToString(), v.ToString()});
    return rocksdb::Status::OK();
  }
  rocksdb::Status EndKeyGroup() override { return rocksdb::Status::OK(); }
  rocksdb::Status Finish() override { return rocksdb::Status::OK(); }
};

void PutBE32(std::string* out, uint32_t v) {
  for (int i = 3; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// The section as FullSnapshotWriter lays it out: runs of one state, the flag on the last
// key of a run, the end mark.
std::string Body(const std::vector<Entry>& entries) {
  std::string out;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (i == 0 || entries[i - 1].state != e.state) {
      out.push_back(static_cast<char>(e.state >> 8));
      out.push_back(static_cast<char>(e.state & 0xFF));
    }
    const bool last = i + 1 == entries.size() || entries[i + 1].state != e.state;
    std::string key = e.key;
    if (last) key[0] = static_cast<char>(key[0] | kMetaFollowsFlag);
    PutBE32(&out, static_cast<uint32_t>(key.size()));
    out += key;
    PutBE32(&out, static_cast<uint32_t>(e.value.size()));
    out += e.value;
  }
  out.push_back(static_cast<char>(0xFF));
  out.push_back(static_cast<char>(0xFF));
  return out;
}

std::string Encode(const std::vector<Entry>& entries, bool compress, fuzz::MemFile* file,
                   size_t piece) {
  const std::string body = Body(entries);
  FileWriter w;
  if (!w.Open(file->path(), false).ok()) std::abort();
  if (compress) {
    FramedWriter framed(&w);
    if (!framed.Begin().ok()) std::abort();
    // in pieces, as the writer appends entry by entry
    for (size_t pos = 0; pos < body.size(); pos += piece) {
      const size_t n = std::min(piece, body.size() - pos);
      if (!framed.Append(body.data() + pos, n, entries.empty() ? 0 : entries[0].state).ok()) {
        std::abort();
      }
    }
    if (!framed.Finish().ok()) std::abort();
  } else if (!w.Append(body.data(), body.size()).ok()) {
    std::abort();
  }
  if (!w.Close().ok()) std::abort();
  return file->Read();
}

rocksdb::Status Decode(const std::string& path, int32_t kg, bool compressed, int prefix,
                       int states, std::vector<Entry>* out) {
  FullSnapshotReader reader;
  rocksdb::Status st = reader.Open(path);
  if (!st.ok()) return st;
  std::vector<int> cf_for_state;
  for (int s = 0; s < states; ++s) cf_for_state.push_back(s);
  CollectSink sink;
  RestoreStats stats;
  st = reader.RestoreKeyGroup(kg, 0, compressed, prefix, cf_for_state, &sink, &stats);
  if (st.ok()) {
    FUZZ_CHECK(stats.entries == sink.entries.size());
    FUZZ_CHECK(stats.key_groups == 1);
  }
  *out = std::move(sink.entries);
  return st;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile* in = new fuzz::MemFile();
  static fuzz::MemFile* again = new fuzz::MemFile();
  fuzz::Input input(data, size);
  const uint8_t flags = input.Byte();
  const bool compressed = flags & 1;
  const int prefix = (flags & 2) ? 2 : 1;
  const int states = 1 + input.Below(4);
  const int32_t kg = static_cast<int32_t>(((input.Byte() << 8) | input.Byte()) %
                                          (prefix == 1 ? 128 : 32768));
  std::vector<Entry> decoded;
  if (flags & 4) {
    // structured: entries of this key group, their bytes from the input
    std::vector<Entry> entries;
    while (input.left() > 0 && entries.size() < 64) {
      Entry e;
      e.state = static_cast<int>(input.Below(static_cast<uint32_t>(states)));
      e.key.assign(static_cast<size_t>(prefix), '\0');
      WriteKeyGroupPrefix(kg, prefix, &e.key[0]);
      e.key += input.Bytes(input.Below(24));
      const size_t vn = input.Bit() ? input.Below(200) : static_cast<size_t>(input.Byte()) * 300;
      e.value = input.Bytes(vn);
      entries.push_back(std::move(e));
    }
    const std::string bytes = Encode(entries, compressed, in, 1 + (flags >> 3) * 97);
    const rocksdb::Status st = Decode(in->path(), kg, compressed, prefix, states, &decoded);
    FUZZ_CHECK(st.ok());
    FUZZ_CHECK(decoded == entries);
    return 0;
  }
  const rocksdb::Status st = Decode(in->Write(input.Rest()), kg, compressed, prefix, states,
                                    &decoded);
  if (!st.ok()) {
    FUZZ_CHECK(st.IsCorruption() || st.IsIOError());
    return 0;
  }
  for (const Entry& e : decoded) {
    FUZZ_CHECK(e.key.size() >= static_cast<size_t>(prefix));
    FUZZ_CHECK(ReadKeyGroupPrefix(e.key.data(), prefix) == kg);
    FUZZ_CHECK(e.state >= 0 && e.state < states);
  }
  // round trip: what was accepted, written again, reads back the same
  std::vector<Entry> twice;
  Encode(decoded, compressed, again, 65536);
  FUZZ_CHECK(Decode(again->path(), kg, compressed, prefix, states, &twice).ok());
  FUZZ_CHECK(twice == decoded);
  return 0;
}
