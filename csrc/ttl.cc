#include "ttl.h"

#include <algorithm>
#include <utility>

namespace stateengine {
namespace {

void PutStamp(std::string* out, int64_t ts) { PutBE64(out, static_cast<uint64_t>(ts)); }

int64_t GetStamp(const char* p) { return static_cast<int64_t>(GetBE64(p)); }

// Calls fn(ts, element) for each element of a stored TTL list ([ts][element] joined by ',');
// false if the bytes do not parse. Elements are self-delimiting, so no delimiter is searched.
template <typename Fn>
bool ForEachStamped(const TtlState& state, const rocksdb::Slice& stored, Fn&& fn) {
  const char* p = stored.data();
  const size_t n = stored.size();
  size_t pos = 0;
  while (true) {
    if (n - pos < kTtlStampBytes) return false;
    const int64_t ts = GetStamp(p + pos);
    pos += kTtlStampBytes;
    size_t len = 0;
    if (!state.ElementLength(p + pos, n - pos, &len)) return false;
    fn(ts, rocksdb::Slice(p + pos, len));
    pos += len;
    if (pos == n) return true;
    if (p[pos] != kListDelimiter || pos + 1 == n) return false;
    ++pos;
  }
}

rocksdb::Status Malformed(const char* what) {
  return rocksdb::Status::Corruption(std::string("a stored entry of a state with TTL is malformed: ") +
                                     what);
}

rocksdb::Status OutOfRange(const std::string& name, int64_t ts, int64_t ttl) {
  return rocksdb::Status::InvalidArgument(
      "stateengine.ttl-range: state '" + name + "' holds an entry last accessed at " +
      std::to_string(ts) + " ms, which with the state's TTL of " + std::to_string(ttl) +
      " ms expires past int64 milliseconds; it was written with a TTL time or TTL outside that "
      "range, or is corrupted");
}

class TtlCompactionFilter : public rocksdb::CompactionFilter {
 public:
  explicit TtlCompactionFilter(std::shared_ptr<const TtlState> state) : state_(std::move(state)) {}

  Decision FilterV2(int /*level*/, const rocksdb::Slice& /*key*/, ValueType type,
                    const rocksdb::Slice& value, std::string* new_value,
                    std::string* /*skip_until*/) const override {
    // Merge operands are list appends (each element stamped) in a list's family; elsewhere a
    // family with TTL takes no merges, so anything but a value is left alone.
    if (type == ValueType::kBlobIndex) return Decision::kKeep;
    if (type == ValueType::kMergeOperand && state_->layout() != TtlLayout::kList) {
      return Decision::kKeep;
    }
    const int64_t ttl = state_->ttl_ms();
    const int64_t now = state_->clock().now();
    if (ttl <= 0 || now == kTtlTimeUnset) return Decision::kKeep;
    bool keep = true, changed = false;
    state_->Purge(value, now, ttl, &keep, &changed, new_value);
    if (!keep) return Decision::kRemove;
    return changed ? Decision::kChangeValue : Decision::kKeep;
  }

  const char* Name() const override { return "stateengine.TtlCompactionFilter"; }

 private:
  std::shared_ptr<const TtlState> state_;
};

class TtlCompactionFilterFactory : public rocksdb::CompactionFilterFactory {
 public:
  explicit TtlCompactionFilterFactory(std::shared_ptr<const TtlState> state)
      : state_(std::move(state)) {}

  // One filter per (sub)compaction: it holds no mutable state, so this costs an allocation.
  std::unique_ptr<rocksdb::CompactionFilter> CreateCompactionFilter(
      const rocksdb::CompactionFilter::Context& /*context*/) override {
    return std::make_unique<TtlCompactionFilter>(state_);
  }

  const char* Name() const override { return "stateengine.TtlCompactionFilterFactory"; }

 private:
  std::shared_ptr<const TtlState> state_;
};

class TtlPurgingIterator : public rocksdb::Iterator {
 public:
  TtlPurgingIterator(std::unique_ptr<rocksdb::Iterator> base,
                     std::shared_ptr<const TtlState> state, int64_t now, int64_t ttl)
      : base_(std::move(base)), state_(std::move(state)), now_(now), ttl_(ttl) {}

  bool Valid() const override { return base_->Valid(); }
  void SeekToFirst() override {
    base_->SeekToFirst();
    SkipForward();
  }
  void SeekToLast() override {
    base_->SeekToLast();
    SkipBackward();
  }
  void Seek(const rocksdb::Slice& target) override {
    base_->Seek(target);
    SkipForward();
  }
  void SeekForPrev(const rocksdb::Slice& target) override {
    base_->SeekForPrev(target);
    SkipBackward();
  }
  void Next() override {
    base_->Next();
    SkipForward();
  }
  void Prev() override {
    base_->Prev();
    SkipBackward();
  }
  rocksdb::Slice key() const override { return base_->key(); }
  rocksdb::Slice value() const override {
    return rewritten_ ? rocksdb::Slice(value_) : base_->value();
  }
  rocksdb::Status status() const override { return base_->status(); }

 private:
  bool Accept() {
    bool keep = true, changed = false;
    value_.clear();
    state_->Purge(base_->value(), now_, ttl_, &keep, &changed, &value_);
    rewritten_ = changed;
    return keep;
  }
  void SkipForward() {
    while (base_->Valid() && !Accept()) base_->Next();
  }
  void SkipBackward() {
    while (base_->Valid() && !Accept()) base_->Prev();
  }

  std::unique_ptr<rocksdb::Iterator> base_;
  std::shared_ptr<const TtlState> state_;
  const int64_t now_;
  const int64_t ttl_;
  std::string value_;
  bool rewritten_ = false;
};

}  // namespace

TtlState::TtlState(TtlLayout layout, Codec value_codec, bool numeric, NumericOp op,
                   std::shared_ptr<TtlClock> clock, std::string name)
    : layout_(layout),
      codec_(value_codec),
      numeric_(numeric),
      op_(op),
      clock_(std::move(clock)),
      name_(std::move(name)) {}

rocksdb::Status TtlState::Configure(int64_t ttl_ms, bool update_on_read, bool return_expired,
                                    const std::string& row_program,
                                    const std::string& row_versions) {
  if (codec_ == kStruct && row_ == nullptr) {
    auto row = std::make_unique<RowSchema>();
    if (!row->Compile(row_program.data(), row_program.size())) {
      return rocksdb::Status::InvalidArgument("the value schema of a typed state does not compile");
    }
    if (!row_versions.empty()) {
      auto versions = std::make_unique<RowVersions>();
      if (!versions->Build(row_versions.data(), row_versions.size())) {
        return rocksdb::Status::InvalidArgument("the schema history of a typed state does not compile");
      }
      versions_ = std::move(versions);
    }
    row_ = std::move(row);  // published to other threads by the release store below
  }
  update_on_read_.store(update_on_read, std::memory_order_relaxed);
  return_expired_.store(return_expired, std::memory_order_relaxed);
  ttl_ms_.store(ttl_ms, std::memory_order_release);
  return rocksdb::Status::OK();
}

bool TtlState::ElementLength(const char* p, size_t n, size_t* len) const {
  if (codec_ == kStruct) {
    if (versions_ != nullptr) return versions_->Length(p, n, len);
    return row_ != nullptr && row_->Length(0, p, n, len);
  }
  return stateengine::ElementLength(codec_, p, n, len);
}

rocksdb::Status TtlState::AccessTime(int64_t* now) const {
  *now = clock_->now();
  if (*now == kTtlTimeUnset) {
    return rocksdb::Status::InvalidArgument(
        "stateengine.ttl: a state with TTL was used before any TTL time was set");
  }
  if (ttl_ms() <= 0) {
    return rocksdb::Status::InvalidArgument(
        "stateengine.ttl: a state with TTL was used before its descriptor configured it");
  }
  return rocksdb::Status::OK();
}

rocksdb::Status TtlState::Stamp(const rocksdb::Slice& plain, int64_t now,
                                std::string* out) const {
  out->clear();
  switch (layout_) {
    case TtlLayout::kValue:
      out->reserve(kTtlStampBytes + plain.size());
      PutStamp(out, now);
      out->append(plain.data(), plain.size());
      return rocksdb::Status::OK();
    case TtlLayout::kMap:
      if (plain.empty()) return rocksdb::Status::InvalidArgument("a map value without its null flag");
      out->reserve(kTtlStampBytes + plain.size());
      out->push_back(plain[0]);
      PutStamp(out, now);
      out->append(plain.data() + 1, plain.size() - 1);
      return rocksdb::Status::OK();
    case TtlLayout::kList: {
      const char* p = plain.data();
      const size_t n = plain.size();
      size_t pos = 0;
      out->reserve(n + n / 2 + kTtlStampBytes);
      while (pos < n) {
        size_t len = 0;
        if (!ElementLength(p + pos, n - pos, &len)) {
          return rocksdb::Status::InvalidArgument("list elements do not parse under their codec");
        }
        if (!out->empty()) out->push_back(kListDelimiter);
        PutStamp(out, now);
        out->append(p + pos, len);
        pos += len;
        if (pos < n) {
          if (p[pos] != kListDelimiter || pos + 1 == n) {
            return rocksdb::Status::InvalidArgument("list elements are not joined by ','");
          }
          ++pos;
        }
      }
      return rocksdb::Status::OK();
    }
    case TtlLayout::kNone:
    default:
      out->assign(plain.data(), plain.size());
      return rocksdb::Status::OK();
  }
}

rocksdb::Status TtlState::Read(const rocksdb::Slice& stored, int64_t now, bool write_back,
                               TtlVerdict* verdict, std::string* plain,
                               std::string* rewrite) const {
  const int64_t ttl = ttl_ms();
  const bool refresh = write_back && update_on_read();
  const bool show_expired = return_expired();
  *verdict = TtlVerdict();
  if (layout_ == TtlLayout::kValue || layout_ == TtlLayout::kMap) {
    const size_t at = layout_ == TtlLayout::kMap ? 1 : 0;  // after the map's null flag
    if (stored.size() < at + kTtlStampBytes) return Malformed("shorter than its timestamp");
    const char* rest = stored.data() + at + kTtlStampBytes;
    const size_t rest_len = stored.size() - at - kTtlStampBytes;
    const int64_t ts = GetStamp(stored.data() + at);
    if (!TtlExpiryInRange(ts, ttl)) return OutOfRange(name_, ts, ttl);
    if (TtlExpired(ts, ttl, now)) {
      verdict->visible = show_expired;
      if (write_back) verdict->write_back = TtlWriteBack::kDelete;
    } else {
      verdict->visible = true;
      if (refresh) {
        verdict->write_back = TtlWriteBack::kRewrite;
        rewrite->clear();
        rewrite->append(stored.data(), at);
        PutStamp(rewrite, now);
        rewrite->append(rest, rest_len);
      }
    }
    if (verdict->visible && plain != nullptr) {
      plain->append(stored.data(), at);
      plain->append(rest, rest_len);
    }
    return rocksdb::Status::OK();
  }
  // A list: every element expires on its own.
  bool any_unexpired = false, any_expired = false, any_shown = false;
  const size_t plain_start = plain->size();
  int64_t out_of_range = 0;
  bool in_range = true;
  const bool ok = ForEachStamped(*this, stored, [&](int64_t ts, const rocksdb::Slice& e) {
    if (!TtlExpiryInRange(ts, ttl) && in_range) {
      in_range = false;
      out_of_range = ts;
    }
    const bool expired = TtlExpired(ts, ttl, now);
    (expired ? any_expired : any_unexpired) = true;
    if (!expired || show_expired) {
      if (any_shown) plain->push_back(kListDelimiter);
      plain->append(e.data(), e.size());
      any_shown = true;
    }
  });
  if (!ok) return Malformed("list elements do not parse");
  if (!in_range) {
    plain->resize(plain_start);  // nothing of this entry is returned
    return OutOfRange(name_, out_of_range, ttl);
  }
  verdict->visible = any_shown;
  if (!write_back) return rocksdb::Status::OK();
  // As Flink's TtlListState: a read drops the expired elements it met (the list is cleared
  // when none is left) and, under OnReadAndWrite, stores the others with the time of the
  // read. A list with nothing to change is not written (a second pass only then).
  if (!any_unexpired) {
    verdict->write_back = TtlWriteBack::kDelete;
  } else if (refresh || any_expired) {
    verdict->write_back = TtlWriteBack::kRewrite;
    rewrite->clear();
    ForEachStamped(*this, stored, [&](int64_t ts, const rocksdb::Slice& e) {
      if (TtlExpired(ts, ttl, now)) return;
      if (!rewrite->empty()) rewrite->push_back(kListDelimiter);
      PutStamp(rewrite, refresh ? now : ts);
      rewrite->append(e.data(), e.size());
    });
  }
  return rocksdb::Status::OK();
}

void TtlState::Purge(const rocksdb::Slice& stored, int64_t now, int64_t ttl, bool* keep,
                     bool* changed, std::string* kept) const {
  *keep = true;
  *changed = false;
  if (layout_ == TtlLayout::kValue || layout_ == TtlLayout::kMap) {
    const size_t at = layout_ == TtlLayout::kMap ? 1 : 0;
    if (stored.size() >= at + kTtlStampBytes) {
      *keep = !TtlExpired(GetStamp(stored.data() + at), ttl, now);
    }
    return;
  }
  if (layout_ != TtlLayout::kList) return;
  // Flink drops the expired prefix of a list; every expired element goes here, wherever it
  // is (OnReadAndWrite and update() restamp lists, so stamps need not grow along a list).
  size_t expired = 0, total = 0;
  if (!ForEachStamped(*this, stored, [&](int64_t ts, const rocksdb::Slice&) {
        ++total;
        if (TtlExpired(ts, ttl, now)) ++expired;
      })) {
    return;  // unparsable: left to the reads, which report it
  }
  if (expired == 0) return;
  if (expired == total) {
    *keep = false;
    return;
  }
  kept->clear();
  kept->reserve(stored.size());
  ForEachStamped(*this, stored, [&](int64_t ts, const rocksdb::Slice& e) {
    if (TtlExpired(ts, ttl, now)) return;
    if (!kept->empty()) kept->push_back(kListDelimiter);
    PutStamp(kept, ts);
    kept->append(e.data(), e.size());
  });
  *changed = true;
}

rocksdb::Status TtlState::Fold(const rocksdb::Slice* stored, const rocksdb::Slice& operand,
                               int64_t now, std::string* out) const {
  Number acc;
  bool have = false;
  if (stored != nullptr) {
    if (stored->size() < kTtlStampBytes) return Malformed("shorter than its timestamp");
    const int64_t ts = GetStamp(stored->data());
    if (!TtlExpiryInRange(ts, ttl_ms())) return OutOfRange(name_, ts, ttl_ms());
    // Flink's TtlReduceFunction / TtlAggregateFunction: an expired accumulator is dropped
    // (or still used, when expired values are returned) and the result gets the new time.
    if (!TtlExpired(ts, ttl_ms(), now) || return_expired()) {
      if (!ReadNumber(codec_, stored->data() + kTtlStampBytes,
                      stored->size() - kTtlStampBytes, &acc)) {
        return Malformed("not a number of the state's value type");
      }
      have = true;
    }
  }
  Number n;
  if (!ReadNumber(codec_, operand.data(), operand.size(), &n)) {
    return rocksdb::Status::InvalidArgument("an operand that is not a number of the state's type");
  }
  acc = have ? CombineNumbers(op_, acc, n) : n;
  out->clear();
  PutStamp(out, now);
  WriteNumber(codec_, acc, out);
  return rocksdb::Status::OK();
}

std::shared_ptr<rocksdb::CompactionFilterFactory> NewTtlCompactionFilterFactory(
    std::shared_ptr<const TtlState> state) {
  return std::make_shared<TtlCompactionFilterFactory>(std::move(state));
}

std::unique_ptr<rocksdb::Iterator> NewTtlPurgingIterator(std::unique_ptr<rocksdb::Iterator> base,
                                                         std::shared_ptr<const TtlState> state,
                                                         int64_t now, int64_t ttl) {
  return std::make_unique<TtlPurgingIterator>(std::move(base), std::move(state), now, ttl);
}

}  // namespace stateengine
