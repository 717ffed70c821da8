// Shared by the libFuzzer harnesses that encode Arrow arrays (row_codec, row_evolution): the
// ArrowSchema of a RowSchema node, as pyarrow would describe it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "arrow_rows.h"
#include "row_codec.h"

namespace fuzz {

using namespace stateengine;  // NOLINT: the row types' names, in the harnesses' own namespace

// The Arrow type of a node and its ArrowSchema (once Link has run).
struct Type {
  std::string format;
  std::vector<std::unique_ptr<Type>> kids;
  std::vector<ArrowSchema*> kid_ptrs;
  ArrowSchema schema{};
};

inline std::unique_ptr<Type> ArrowType(const RowSchema& s, uint32_t index) {
  auto t = std::make_unique<Type>();
  const RowNode& n = s.node(index);
  switch (n.type) {
    case kRowBigint: t->format = "l"; break;
    case kRowInt: t->format = "i"; break;
    case kRowSmallint: t->format = "s"; break;
    case kRowTinyint: t->format = "c"; break;
    case kRowDouble: t->format = "g"; break;
    case kRowFloat: t->format = "f"; break;
    case kRowString: t->format = "u"; break;
    case kRowBinary: t->format = "z"; break;
    case kRowBoolean: t->format = "b"; break;
    case kRowDate: t->format = "tdD"; break;
    case kRowTimestamp: t->format = "tsu:UTC"; break;
    case kRowTimestampNtz: t->format = "tsu:"; break;
    case kRowDecimal:
      t->format = "d:" + std::to_string(n.precision) + "," + std::to_string(n.scale);
      break;
    case kRowArray:
      t->format = "+l";
      t->kids.push_back(ArrowType(s, s.child(n, 0)));
      break;
    case kRowMap: {
      t->format = "+m";
      auto entries = std::make_unique<Type>();
      entries->format = "+s";
      entries->kids.push_back(ArrowType(s, s.child(n, 0)));
      entries->kids.push_back(ArrowType(s, s.child(n, 1)));
      t->kids.push_back(std::move(entries));
      break;
    }
    case kRowStruct:
      t->format = "+s";
      for (uint32_t i = 0; i < n.num_children; ++i) t->kids.push_back(ArrowType(s, s.child(n, i)));
      break;
  }
  return t;
}

// Points every ArrowSchema of t at its format and children (after t's tree is built).
inline void Link(Type* t) {
  for (auto& k : t->kids) {
    Link(k.get());
    t->kid_ptrs.push_back(&k->schema);
  }
  t->schema.format = t->format.c_str();
  t->schema.name = "";
  t->schema.n_children = static_cast<int64_t>(t->kids.size());
  t->schema.children = t->kid_ptrs.empty() ? nullptr : t->kid_ptrs.data();
}

}  // namespace fuzz
