// Schema evolution of typed state (stateengine/evolution.py): the values of a state whose
// schema changed carry the version they were written in, and old ones are transcoded into
// the current schema's encoding before the usual decoders (row_codec.h, arrow_rows.h) see
// them. A value of an evolved state begins with a version marker, escape + varint(id), unless
// it is in version 0's schema; the escape is chosen so that no encoding of version 0 begins
// with it (docs/ARCHITECTURE.md, "Schema evolution").
// Invariant: a version's bytes are validated by that version's RowSchema::Length before they
// are transcoded, and the transcoder writes only encodings the current schema accepts, so a
// reader never trusts bytes no schema checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "row_codec.h"

namespace stateengine {

// One old version's values -> the current schema's encoding (evolution.plan_program).
class RowUpgrade {
 public:
  // Compiles plan from the old version's schema to the current one; false if malformed or if
  // it does not fit both (indexes, widened types, nullability, defaults that are not valid
  // encodings of their field), so that Apply only writes what the current schema accepts.
  bool Compile(const RowSchema* old_schema, const RowSchema* new_schema, const char* plan,
               size_t n);

  // Appends the current encoding of the old value at p (n bytes, already validated by the
  // old schema's Length); false if the bytes do not fit (never for validated bytes).
  bool Apply(const char* p, size_t n, std::string* out) const;

 private:
  struct Op {
    uint8_t code = 0;
    uint8_t to = 0;           // kOpWiden: the new RowType
    uint32_t first = 0;       // kOpStruct: first of num fields in fields_; array/map: child op
    uint32_t num = 0;
  };
  struct Field {
    uint8_t source = 0;       // 0 old field, 1 null, 2 default
    uint32_t old_index = 0;
    uint32_t op = 0;          // source 0: the field's op
    uint32_t offset = 0;      // source 2: the default's bytes in defaults_
    uint32_t length = 0;
  };

  bool CompileOp(const char* p, size_t n, size_t* pos, uint32_t old_node, uint32_t new_node,
                 int depth, uint32_t* index);
  // Whether the old node's bytes are valid as the new node's unchanged (kOpCopy).
  bool SameLayout(uint32_t old_node, uint32_t new_node, int depth) const;
  bool ApplyOp(uint32_t op, uint32_t old_node, const char* p, size_t n, std::string* out,
               size_t* used) const;

  const RowSchema* old_ = nullptr;
  const RowSchema* new_ = nullptr;
  std::vector<Op> ops_;
  std::vector<Field> fields_;
  std::string defaults_;
};

// Every version of an evolved state's value schema (evolution.History.spec).
class RowVersions {
 public:
  // False if the spec is malformed or inconsistent: an escape other than version 0's, a
  // written version not laid out as the current schema, a direct version whose bytes the
  // current schema would not accept, a plan that does not fit both of its schemas.
  bool Build(const char* spec, size_t n);

  // The marker written before every value now (empty when the current values are laid out
  // like version 0's).
  const std::string& write_prefix() const { return write_prefix_; }
  size_t size() const { return schemas_.size(); }
  // The current (last) version's schema, which upgraded values are encoded in.
  const RowSchema& current() const { return *schemas_.back(); }
  const RowSchema& schema(uint32_t version) const { return *schemas_[version]; }

  // The version of the value at p and its marker's length; false if a marker names no version.
  bool Classify(const char* p, size_t n, uint32_t* version, size_t* marker) const;
  // Whether values of a version decode as the current schema's as they are.
  bool direct(uint32_t version) const { return direct_[version] != 0; }

  // Length of the value at p, marker included (list elements of TTL states).
  bool Length(const char* p, size_t n, size_t* len) const;

  // Reads the marker of the value at p (n bytes available). A direct version: *upgraded is
  // false and the value, in the current schema, begins at p + *marker. Otherwise the old
  // value (validated by its schema) is transcoded into *scratch (replacing its contents),
  // *upgraded is true and *old_len is its length after the marker. whole: the value must take
  // all n bytes (a value, a map value); else it is a list element. False if malformed.
  bool Read(const char* p, size_t n, bool whole, std::string* scratch, size_t* marker,
            bool* upgraded, size_t* old_len) const {
    // the common case inline: a value written now (its marker is write_prefix_, the current
    // layout), which Classify would name the same way
    const size_t w = write_prefix_.size();
    if (w != 0 && n > w && SamePrefix(p, write_prefix_.data(), w)) {
      *marker = w;
      *upgraded = false;
      return true;
    }
    return ReadMarked(p, n, whole, scratch, marker, upgraded, old_len);
  }

 private:
  static bool SamePrefix(const char* p, const char* q, size_t w) {
    for (size_t i = 0; i < w; ++i) {
      if (p[i] != q[i]) return false;
    }
    return true;
  }
  bool ReadMarked(const char* p, size_t n, bool whole, std::string* scratch, size_t* marker,
                  bool* upgraded, size_t* old_len) const;

  std::string escape_;
  std::string write_prefix_;
  std::vector<std::unique_ptr<RowSchema>> schemas_;
  std::vector<std::unique_ptr<RowUpgrade>> upgrades_;  // null for direct versions
  std::vector<uint8_t> direct_;
};

}  // namespace stateengine
