// Merge operators run inside RocksDB (also in its background compaction threads), so they are
// C++ and never call back into Python.
// Invariant (list): a stored list is its elements' encodings joined by ',' (0x2C), exactly as
// Flink's RocksDB list state stores them; an operand is one element or a pre-joined run.
// Invariant (numeric): values and operands are numbers in the column family's value codec and
// the stored value is always the reduction of every operand merged so far.
#pragma once

#include <memory>

#include <rocksdb/merge_operator.h>

#include "codec.h"

namespace stateengine {

constexpr char kListDelimiter = ',';

enum class NumericOp : uint8_t { kSum = 1, kMin = 2, kMax = 3 };

std::shared_ptr<rocksdb::MergeOperator> NewListAppendOperator();
std::shared_ptr<rocksdb::MergeOperator> NewNumericOperator(NumericOp op, Codec value_codec);

// Combines two numbers under op: sums stay integral while both are integers (int64 wraps
// like Java's long, which is what Spark and Flink users expect).
Number CombineNumbers(NumericOp op, const Number& a, const Number& b);

}  // namespace stateengine
