#include "merge_operators.h"

#include <string>

namespace stateengine {
namespace {

class ListAppendOperator : public rocksdb::MergeOperator {
 public:
  bool FullMergeV2(const MergeOperationInput& in, MergeOperationOutput* out) const override {
    std::string& result = out->new_value;
    size_t total = in.existing_value ? in.existing_value->size() : 0;
    for (const auto& op : in.operand_list) total += op.size() + 1;
    result.clear();
    result.reserve(total);
    if (in.existing_value) result.assign(in.existing_value->data(), in.existing_value->size());
    for (const auto& op : in.operand_list) {
      if (!result.empty()) result.push_back(kListDelimiter);
      result.append(op.data(), op.size());
    }
    return true;
  }

  bool PartialMergeMulti(const rocksdb::Slice& /*key*/,
                         const std::deque<rocksdb::Slice>& operands, std::string* new_value,
                         rocksdb::Logger* /*logger*/) const override {
    new_value->clear();
    for (const auto& op : operands) {
      if (!new_value->empty()) new_value->push_back(kListDelimiter);
      new_value->append(op.data(), op.size());
    }
    return true;
  }

  const char* Name() const override { return "stateengine.ListAppend"; }
};

class NumericOperator : public rocksdb::MergeOperator {
 public:
  NumericOperator(NumericOp op, Codec codec)
      : op_(op), codec_(codec), name_("stateengine.Numeric." + std::to_string(int(op)) + "." +
                                      std::to_string(int(codec))) {}

  bool FullMergeV2(const MergeOperationInput& in, MergeOperationOutput* out) const override {
    Number acc;
    bool have = false;
    if (in.existing_value) {
      if (!ReadNumber(codec_, in.existing_value->data(), in.existing_value->size(), &acc)) {
        return false;  // RocksDB reports Corruption to the reader.
      }
      have = true;
    }
    for (const auto& operand : in.operand_list) {
      Number n;
      if (!ReadNumber(codec_, operand.data(), operand.size(), &n)) return false;
      acc = have ? CombineNumbers(op_, acc, n) : n;
      have = true;
    }
    out->new_value.clear();
    WriteNumber(codec_, acc, &out->new_value);
    return true;
  }

  bool PartialMerge(const rocksdb::Slice& /*key*/, const rocksdb::Slice& left,
                    const rocksdb::Slice& right, std::string* new_value,
                    rocksdb::Logger* /*logger*/) const override {
    Number a, b;
    if (!ReadNumber(codec_, left.data(), left.size(), &a) ||
        !ReadNumber(codec_, right.data(), right.size(), &b)) {
      return false;
    }
    new_value->clear();
    WriteNumber(codec_, CombineNumbers(op_, a, b), new_value);
    return true;
  }

  const char* Name() const override { return name_.c_str(); }

 private:
  const NumericOp op_;
  const Codec codec_;
  const std::string name_;
};

// Exact comparison of an int64 and a double (long double holds every int64 exactly on x86;
// elsewhere this degrades to double precision, which only matters beyond 2^53).
bool Less(const Number& a, const Number& b) {
  if (a.is_int && b.is_int) return a.i < b.i;
  if (!a.is_int && !b.is_int) return a.d < b.d;
  const long double x = a.is_int ? static_cast<long double>(a.i) : a.d;
  const long double y = b.is_int ? static_cast<long double>(b.i) : b.d;
  return x < y;
}

}  // namespace

Number CombineNumbers(NumericOp op, const Number& a, const Number& b) {
  switch (op) {
    case NumericOp::kSum: {
      Number r;
      if (a.is_int && b.is_int) {
        r.is_int = true;
        r.i = static_cast<int64_t>(static_cast<uint64_t>(a.i) + static_cast<uint64_t>(b.i));
      } else {
        r.is_int = false;
        r.d = a.AsDouble() + b.AsDouble();
      }
      return r;
    }
    case NumericOp::kMin:
      return Less(b, a) ? b : a;
    case NumericOp::kMax:
    default:
      return Less(a, b) ? b : a;
  }
}

std::shared_ptr<rocksdb::MergeOperator> NewListAppendOperator() {
  return std::make_shared<ListAppendOperator>();
}

std::shared_ptr<rocksdb::MergeOperator> NewNumericOperator(NumericOp op, Codec value_codec) {
  return std::make_shared<NumericOperator>(op, value_codec);
}

}  // namespace stateengine
