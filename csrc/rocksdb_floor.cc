#include "rocksdb_floor.h"

#include <chrono>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

namespace stateengine {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

rocksdb::Status MeasureFloor(StateDB* db, int cf, const KeyBatch& batch, int op,
                             double* seconds) {
  rocksdb::DB* raw = db->raw();
  rocksdb::ColumnFamilyHandle* h = db->handle(cf);
  const rocksdb::ReadOptions ro;
  const rocksdb::WriteOptions& wo = db->write_options();
  rocksdb::Status st;
  if (op == kFloorPointGet) {
    rocksdb::PinnableSlice value;
    const auto& group_of = batch.group_of();
    const double t0 = Now();
    for (size_t row = 0; row < batch.rows(); ++row) {
      value.Reset();
      st = raw->Get(ro, h, batch.group_key(group_of[row]), &value);
      if (!st.ok() && !st.IsNotFound()) return st;
    }
    *seconds = Now() - t0;
    return rocksdb::Status::OK();
  }
  if (op == kFloorMultiGet) {
    BatchValues unused;
    const double t0 = Now();
    // its copies of the values are part of any read; MultiGets even where a batch would scan
    st = BatchGet(db, cf, batch, &unused, true, kReadPoint);
    *seconds = Now() - t0;
    return st;
  }
  if (op != kFloorPointPut && op != kFloorWriteBatch) {
    return rocksdb::Status::InvalidArgument("unknown floor operation");
  }
  BatchValues current;
  st = BatchGet(db, cf, batch, &current);
  if (!st.ok()) return st;
  const double t0 = Now();
  if (op == kFloorPointPut) {
    const auto& group_of = batch.group_of();
    for (size_t row = 0; row < batch.rows(); ++row) {  // input order, as a scalar loop writes
      const uint32_t g = group_of[row];
      if (!current.found[g]) continue;
      st = raw->Put(wo, h, batch.group_key(g), current.value(g));
      if (!st.ok()) return st;
    }
  } else {
    rocksdb::WriteBatch wb;
    for (size_t g = 0; g < batch.groups(); ++g) {
      if (!current.found[g]) continue;
      st = wb.Put(h, batch.group_key(g), current.value(g));
      if (!st.ok()) return st;
    }
    st = raw->Write(wo, &wb);
    if (!st.ok()) return st;
  }
  *seconds = Now() - t0;
  return rocksdb::Status::OK();
}

}  // namespace stateengine
