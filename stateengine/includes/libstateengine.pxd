# C++ declarations of csrc/ (and the few RocksDB types the bindings touch). Every C++ type
# carries a C prefix so it never collides with the Python classes that wrap it.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.memory cimport unique_ptr, shared_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector


cdef extern from "rocksdb/status.h" namespace "rocksdb" nogil:
    cdef cppclass CStatus "rocksdb::Status":
        CStatus()
        cbool ok()
        cbool IsNotFound()
        cbool IsCorruption()
        cbool IsIOError()
        cbool IsInvalidArgument()
        cbool IsIncomplete()
        cbool IsMemoryLimit()
        string ToString()


cdef extern from "rocksdb/slice.h" namespace "rocksdb" nogil:
    cdef cppclass CSlice "rocksdb::Slice":
        CSlice()
        CSlice(const char*, size_t)
        CSlice(const string&)
        const char* data()
        size_t size()

    cdef cppclass CPinnableSlice "rocksdb::PinnableSlice":
        CPinnableSlice()
        const char* data()
        size_t size()
        void Reset()


cdef extern from "rocksdb/write_batch.h" namespace "rocksdb" nogil:
    cdef cppclass CWriteBatch "rocksdb::WriteBatch":
        CWriteBatch()
        void Clear()
        int Count()


cdef extern from "keygroups.h" namespace "stateengine" nogil:
    int32_t kSparkHashSeed
    int32_t CSparkHashInt "stateengine::SparkHashInt"(int32_t, int32_t)
    int32_t CSparkHashLong "stateengine::SparkHashLong"(int64_t, int32_t)
    int32_t CSparkHashBytes "stateengine::SparkHashBytes"(const char*, size_t, int32_t)
    int32_t CSparkHashDouble "stateengine::SparkHashDouble"(double, int32_t)
    int32_t CSparkHashFloat "stateengine::SparkHashFloat"(float, int32_t)
    int32_t CKeyGroupForHash "stateengine::KeyGroupForHash"(int32_t, int32_t)
    int CKeyGroupPrefixBytes "stateengine::KeyGroupPrefixBytes"(int32_t)


cdef extern from "codec.h" namespace "stateengine" nogil:
    ctypedef uint8_t CCodec "stateengine::Codec"
    CCodec kVoid, kAny, kI64, kF64, kStr, kBytes, kBool, kPickle, kI32, kF32
    CCodec kOrdI64, kOrdF64, kOrdStr, kOrdBytes, kStruct, kCodecCount
    uint8_t kTagNone, kTagInt, kTagFloat, kTagStr, kTagBytes, kTagFalse, kTagTrue, kTagPickle
    uint8_t kTagBigInt, kTagTuple, kTagList, kTagDict
    int kMaxAnyDepth

    void CPutBE64 "stateengine::PutBE64"(string*, uint64_t)
    void CPutBE32 "stateengine::PutBE32"(string*, uint32_t)
    uint64_t CGetBE64 "stateengine::GetBE64"(const char*)
    uint32_t CGetBE32 "stateengine::GetBE32"(const char*)
    void CPutVarint "stateengine::PutVarint"(string*, uint64_t)
    size_t CGetVarint "stateengine::GetVarint"(const char*, size_t, uint64_t*)
    uint64_t CDoubleBits "stateengine::DoubleBits"(double)
    double CBitsDouble "stateengine::BitsDouble"(uint64_t)
    double CNormalizeKeyDouble "stateengine::NormalizeKeyDouble"(double)
    uint64_t COrderedI64 "stateengine::OrderedI64"(int64_t)
    int64_t CFromOrderedI64 "stateengine::FromOrderedI64"(uint64_t)
    uint64_t COrderedF64 "stateengine::OrderedF64"(double)
    double CFromOrderedF64 "stateengine::FromOrderedF64"(uint64_t)
    cbool CElementLength "stateengine::ElementLength"(CCodec, const char*, size_t, size_t*)

    cdef cppclass CKeySchema "stateengine::KeySchema":
        CKeySchema()
        CKeySchema(vector[CCodec])
        const vector[CCodec]& columns()
        cbool empty()
        cbool variable_length()
        cbool Hash(const char*, size_t, int32_t*)
        cbool Length(const char*, size_t, size_t*)


cdef extern from "composite_key.h" namespace "stateengine" nogil:
    cbool CIsVariableLengthCodec "stateengine::IsVariableLengthCodec"(CCodec)

    cdef cppclass CCompositeKeyBuilder "stateengine::CompositeKeyBuilder":
        CCompositeKeyBuilder(int, cbool)
        void SetKey(int32_t, const char*, size_t)
        cbool has_key()
        int32_t key_group()
        const char* key_data()
        size_t key_size()
        const string& Build(const string&, cbool)
        const string& BuildWithUserKey(const string&, cbool, const char*, size_t)
        void BuildTimerKey(int64_t, const string&, cbool, string*)

    cdef cppclass CParsedKey "stateengine::ParsedKey":
        int32_t key_group
        size_t key_off, key_len, ns_off, ns_len, user_key_off, user_key_len

    cbool CParseStateKey "stateengine::ParseStateKey"(
        const char*, size_t, int, const CKeySchema&, CCodec, cbool, CParsedKey*)
    cbool CParseTimerKey "stateengine::ParseTimerKey"(
        const char*, size_t, int, const CKeySchema&, int64_t*, CParsedKey*)


cdef extern from "merge_operators.h" namespace "stateengine" nogil:
    ctypedef uint8_t CNumericOp "stateengine::NumericOp"


cdef extern from "ttl.h" namespace "stateengine" nogil:
    int64_t kTtlTimeUnset "stateengine::kTtlTimeUnset"


cdef extern from "db.h" namespace "stateengine" nogil:
    cdef cppclass CMemoryBudget "stateengine::MemoryBudget":
        @staticmethod
        CMemoryBudget& Instance()
        void Configure(size_t, double)
        size_t bytes()
        size_t cache_capacity()
        double write_buffer_ratio()
        size_t CacheUsage()
        size_t MemtableUsage()
        size_t CacheBlockBytes()
        size_t CacheSlabsMapped()

    ctypedef uint8_t CMergeKind "stateengine::MergeKind"

    cdef cppclass CColumnFamilySpec "stateengine::ColumnFamilySpec":
        string name
        CMergeKind merge
        CNumericOp numeric_op
        CCodec numeric_codec

    CColumnFamilySpec CMakeColumnFamilySpec "stateengine::MakeColumnFamilySpec"(
        const string&, int, int, int, int)

    cdef cppclass CKeyValue "stateengine::KeyValue":
        string key
        string value

    cdef cppclass CStateDB "stateengine::StateDB":
        @staticmethod
        CStatus Open(const string&, const vector[CColumnFamilySpec]&, unique_ptr[CStateDB]*,
                     cbool create_if_missing)
        @staticmethod
        void SetBottommostFilters(bint)
        @staticmethod
        bint bottommost_filters()
        CStatus Close()
        void CancelPinned()
        CStatus CreateColumnFamily(const CColumnFamilySpec&, int*)
        int FindColumnFamily(const string&)
        size_t num_column_families()
        const CColumnFamilySpec& spec(int)
        const string& path()
        CStatus Get(int, const CSlice&, CPinnableSlice*)
        CStatus Put(int, const CSlice&, const CSlice&)
        CStatus Merge(int, const CSlice&, const CSlice&)
        CStatus Delete(int, const CSlice&)
        CStatus DeleteRange(int, const CSlice&, const CSlice&)
        CStatus GetNoWait(int, const CSlice&, CPinnableSlice*)
        CStatus PutNoWait(int, const CSlice&, const CSlice&)
        CStatus MergeNoWait(int, const CSlice&, const CSlice&)
        CStatus DeleteNoWait(int, const CSlice&)
        CStatus RawGet(int, const CSlice&, CPinnableSlice*)
        CStatus RawPut(int, const CSlice&, const CSlice&)
        CStatus RawMerge(int, const CSlice&, const CSlice&)
        CStatus ConfigureTtl(int, int64_t, cbool, cbool, const string&, const string&)
        void SetTtlTime(int64_t)
        int64_t ttl_time()
        CStatus Write(CWriteBatch*)
        CStatus PutMany(int, const vector[string]&, const vector[string]&)
        CStatus DeletePrefix(int, const string&)
        CStatus Scan(int, const string&, const string&, size_t, cbool, vector[CKeyValue]*)
        CStatus Count(int, const string&, const string&, uint64_t*)
        CStatus Flush()
        CStatus CompactAll(int target_level)
        uint64_t EstimateNumKeys()
        vector[string] CreatedTableFiles()
        void CountReads(uint64_t)
        void CountWrites(uint64_t)
        void CountDeletes(uint64_t)

    string CPrefixSuccessor "stateengine::PrefixSuccessor"(const string&)


cdef extern from "scan_cursor.h" namespace "stateengine" nogil:
    cdef cppclass CScanCursor "stateengine::ScanCursor":
        CScanCursor(CStateDB*, int, string, string, cbool, cbool) except +
        CStatus Next(size_t, vector[CKeyValue]*, cbool*)
        void Release()


cdef extern from "<utility>" namespace "std" nogil:
    cdef cppclass CIntPair "std::pair<int, int>":
        CIntPair()
        CIntPair(int, int)


cdef extern from "crc32c.h" namespace "stateengine" nogil:
    uint32_t CCrc32c "stateengine::Crc32c"(uint32_t, const char*, size_t)
    cbool CFileCrc32c "stateengine::FileCrc32c"(const string&, uint32_t*, uint64_t*, string*)


cdef extern from "snapshot_writer.h" namespace "stateengine" nogil:
    cdef cppclass CSnapshotColumn "stateengine::SnapshotColumn":
        int cf_index
        int state_id

    cdef cppclass CKeyGroupOffset "stateengine::KeyGroupOffset":
        int32_t key_group
        uint64_t offset

    cdef cppclass CSnapshotStats "stateengine::SnapshotStats":
        uint64_t entries
        uint64_t raw_bytes
        uint64_t file_bytes
        uint32_t file_crc32c

    cdef cppclass CFullSnapshotWriter "stateengine::FullSnapshotWriter":
        CFullSnapshotWriter(CStateDB*, vector[CSnapshotColumn], int, int32_t, int32_t,
                            cbool) except +
        const CStatus& status()
        CStatus Write(const string&, const string&, cbool, vector[CKeyGroupOffset]*,
                      CSnapshotStats*)
        void Cancel()
        void Release()

    CStatus CIterateForBaseline "stateengine::IterateForBaseline"(
        CStateDB*, const vector[int]&, int, int32_t, int32_t, CSnapshotStats*)


cdef extern from "snapshot_reader.h" namespace "stateengine" nogil:
    cdef cppclass CRestoreStats "stateengine::RestoreStats":
        uint64_t entries
        uint64_t raw_bytes
        uint64_t key_groups

    cdef cppclass CSnapshotFile "stateengine::SnapshotFile":
        string path
        cbool compressed
        vector[int] cf_for_state

    cdef cppclass CSectionRef "stateengine::SectionRef":
        int file
        int32_t key_group
        uint64_t offset
        uint64_t end
        bint decode_only

    CStatus CRestoreSections "stateengine::RestoreSections"(
        CStateDB*, int, const vector[CSnapshotFile]&, const vector[CSectionRef]&, const string&,
        CRestoreStats*)


cdef extern from "checkpoint.h" namespace "stateengine" nogil:
    CStatus CCreateCheckpoint "stateengine::CreateCheckpoint"(CStateDB*, const string&)
    CStatus CClipToKeyGroupRange "stateengine::ClipToKeyGroupRange"(
        CStateDB*, int, int32_t, int32_t, int32_t)
    CStatus CCopyKeyGroupRange "stateengine::CopyKeyGroupRange"(
        CStateDB*, CStateDB*, const vector[CIntPair]&, int, int32_t, int32_t, uint64_t*)


cdef extern from "timers.h" namespace "stateengine" nogil:
    CStatus CPopDueTimers "stateengine::PopDueTimers"(
        CStateDB*, int, int, int32_t, int32_t, int64_t, size_t, vector[string]*)
    CStatus CNextTimerTimestamp "stateengine::NextTimerTimestamp"(
        CStateDB*, int, int, int32_t, int32_t, cbool*, int64_t*)


cdef extern from "batch_ingest.h" namespace "stateengine" nogil:
    size_t kDefaultBatchIngestMinKeys "stateengine::kDefaultBatchIngestMinKeys"
    size_t CSetBatchIngestMinKeys "stateengine::SetBatchIngestMinKeys"(size_t)


cdef extern from "batch_ops.h" namespace "stateengine" nogil:
    int kColInt64 "stateengine::kColInt64"
    int kColFloat64 "stateengine::kColFloat64"
    int kColBool "stateengine::kColBool"
    int kColOffsets32 "stateengine::kColOffsets32"
    int kColOffsets64 "stateengine::kColOffsets64"
    int kColFixedBytes "stateengine::kColFixedBytes"
    int kColUcs4 "stateengine::kColUcs4"
    int kColSlices "stateengine::kColSlices"

    int kBatchOk "stateengine::kBatchOk"
    int kBatchKeyGroupOutOfRange "stateengine::kBatchKeyGroupOutOfRange"
    int kBatchValueOutOfRange "stateengine::kBatchValueOutOfRange"
    int kBatchInvalidText "stateengine::kBatchInvalidText"
    int kBatchUnsupported "stateengine::kBatchUnsupported"
    int kBatchBadKey "stateengine::kBatchBadKey"
    int kBatchCorrupt "stateengine::kBatchCorrupt"
    int kBatchTooLarge "stateengine::kBatchTooLarge"
    int kBatchNoMemory "stateengine::kBatchNoMemory"

    cdef cppclass CColumnView "stateengine::ColumnView":
        int kind
        size_t size
        const char* data
        const int32_t* offsets32
        const int64_t* offsets64
        size_t width
        const CSlice* slices
        cbool text
        cbool encoded
        const uint8_t* is_null

    cdef cppclass CBatchError "stateengine::BatchError":
        int code
        size_t row
        int32_t key_group
        cbool user_key

    cdef cppclass CBatchTarget "stateengine::BatchTarget":
        const CKeySchema* schema
        int prefix_bytes
        int32_t max_parallelism
        int32_t kg_start
        int32_t kg_end
        const string* ns
        cbool ns_variable

    cdef cppclass CKeyBatch "stateengine::KeyBatch":
        cbool Build(const CBatchTarget&, const CColumnView&, const CColumnView*, CCodec,
                    CBatchError*)
        size_t rows()
        size_t groups()
        const vector[uint32_t]& order()
        const vector[uint32_t]& group_of()
        const vector[uint32_t]& group_start()

    cdef cppclass CBatchValues "stateengine::BatchValues":
        vector[uint8_t] found
        string data
        vector[size_t] offsets
        void Release()

    cbool CCanEncodeColumn "stateengine::CanEncodeColumn"(int, cbool, CCodec, cbool)
    cbool CCanMergeNumbers "stateengine::CanMergeNumbers"(int, CCodec)
    CStatus CBatchPut "stateengine::BatchPut"(CStateDB*, int, const CKeyBatch&, const CColumnView&,
                                              CCodec, cbool, cbool, CBatchError*)
    CStatus CBatchMergeNumbers "stateengine::BatchMergeNumbers"(
        CStateDB*, int, const CKeyBatch&, const CColumnView&, CCodec, CNumericOp, cbool,
        CBatchError*)
    CStatus CBatchMergeList "stateengine::BatchMergeList"(
        CStateDB*, int, const CKeyBatch&, const CColumnView&, CCodec, CBatchError*)
    int CSetBatchReadMode "stateengine::SetBatchReadMode"(int)
    void CBatchReadCounts "stateengine::BatchReadCounts"(uint64_t*)
    CStatus CBatchGet "stateengine::BatchGet"(CStateDB*, int, const CKeyBatch&, CBatchValues*,
                                              cbool)
    cbool CScatterInt64 "stateengine::ScatterInt64"(const CKeyBatch&, const CBatchValues&, CCodec,
                                                   cbool, int64_t, int64_t*, uint8_t*, CBatchError*)
    cbool CScatterFloat64 "stateengine::ScatterFloat64"(const CKeyBatch&, const CBatchValues&,
                                                       CCodec, cbool, double, double*, uint8_t*,
                                                       CBatchError*)

cdef extern from "rocksdb_floor.h" namespace "stateengine" nogil:
    CStatus CMeasureFloor "stateengine::MeasureFloor"(CStateDB*, int, const CKeyBatch&, int,
                                                      double*)

cdef extern from "db_metrics.h" namespace "stateengine" nogil:
    cdef cppclass CDbMetrics "stateengine::DbMetrics":
        uint64_t estimated_keys
        uint64_t state_keys
        uint64_t timers
        uint64_t live_sst_bytes
        uint64_t sst_files
        uint64_t memtable_bytes
        uint64_t table_reader_bytes
        uint64_t pinned_bytes
        uint64_t pending_compaction_bytes
        uint64_t block_cache_bytes
        uint64_t rows_read
        uint64_t rows_written
        uint64_t rows_deleted
    CStatus CCollectDbMetrics "stateengine::CollectDbMetrics"(CStateDB*, CDbMetrics*)
    vector[uint64_t] CFilesPerLevel "stateengine::FilesPerLevel"(CStateDB*)

cdef extern from "row_codec.h" namespace "stateengine" nogil:
    int kMaxRowDepth "stateengine::kMaxRowDepth"
    int32_t kMinDateDays "stateengine::kMinDateDays"
    int32_t kMaxDateDays "stateengine::kMaxDateDays"
    int64_t kMinTimestampMicros "stateengine::kMinTimestampMicros"
    int64_t kMaxTimestampMicros "stateengine::kMaxTimestampMicros"
    uint8_t kRowBigint "stateengine::kRowBigint"
    uint8_t kRowInt "stateengine::kRowInt"
    uint8_t kRowSmallint "stateengine::kRowSmallint"
    uint8_t kRowTinyint "stateengine::kRowTinyint"
    uint8_t kRowDouble "stateengine::kRowDouble"
    uint8_t kRowFloat "stateengine::kRowFloat"
    uint8_t kRowString "stateengine::kRowString"
    uint8_t kRowBinary "stateengine::kRowBinary"
    uint8_t kRowBoolean "stateengine::kRowBoolean"
    uint8_t kRowDecimal "stateengine::kRowDecimal"
    uint8_t kRowDate "stateengine::kRowDate"
    uint8_t kRowTimestamp "stateengine::kRowTimestamp"
    uint8_t kRowTimestampNtz "stateengine::kRowTimestampNtz"
    uint8_t kRowArray "stateengine::kRowArray"
    uint8_t kRowMap "stateengine::kRowMap"
    uint8_t kRowStruct "stateengine::kRowStruct"

    cdef cppclass CRowNode "stateengine::RowNode":
        uint8_t type
        cbool nullable
        uint8_t precision
        uint8_t scale
        uint32_t num_children
        uint32_t first_child
        uint32_t fixed_width

    cdef cppclass CRowSchema "stateengine::RowSchema":
        cbool Compile(const char*, size_t)
        const CRowNode* nodes()
        const uint32_t* children()
        size_t size()
        cbool Length(uint32_t, const char*, size_t, size_t*)

    size_t CBitmapBytes "stateengine::BitmapBytes"(uint64_t)

cdef extern from "row_evolution.h" namespace "stateengine" nogil:
    cdef cppclass CRowVersions "stateengine::RowVersions":
        cbool Build(const char*, size_t)
        const string& write_prefix()
        size_t size()
        cbool Classify(const char*, size_t, uint32_t*, size_t*)
        cbool direct(uint32_t)
        cbool Length(const char*, size_t, size_t*)
        cbool Read(const char*, size_t, cbool, string*, size_t*, cbool*, size_t*)


cdef extern from "arrow_c.h" nogil:
    cdef struct ArrowSchema:
        const char* format
        void (*release)(ArrowSchema*)

    cdef struct ArrowArray:
        int64_t length
        void (*release)(ArrowArray*)


cdef extern from "arrow_rows.h" namespace "stateengine" nogil:
    int kRowOk "stateengine::kRowOk"
    int kRowArrowType "stateengine::kRowArrowType"
    int kRowNull "stateengine::kRowNull"
    int kRowOutOfRange "stateengine::kRowOutOfRange"
    int kRowCorrupt "stateengine::kRowCorrupt"
    int kRowTooLarge "stateengine::kRowTooLarge"
    int kRowNoMemory "stateengine::kRowNoMemory"
    int kRowNullRow "stateengine::kRowNullRow"
    int kRowInvalidText "stateengine::kRowInvalidText"
    int kNullRowsRefuse "stateengine::kNullRowsRefuse"
    int kNullRowsMark "stateengine::kNullRowsMark"
    int kNullRowsMapFlag "stateengine::kNullRowsMapFlag"
    int kStoredValue "stateengine::kStoredValue"
    int kStoredMapValue "stateengine::kStoredMapValue"
    int kStoredList "stateengine::kStoredList"

    cdef cppclass CRowError "stateengine::RowError":
        int code
        int64_t row
        vector[int64_t] path

    cbool CEncodeArrowRows "stateengine::EncodeArrowRows"(
        const CRowSchema&, const ArrowSchema*, const ArrowArray*, int, const string&, string*,
        vector[int64_t]*, vector[uint8_t]*, CRowError*)
    cbool CDecodeBatchToArrow "stateengine::DecodeBatchToArrow"(
        const CRowSchema&, const CRowVersions*, const CKeyBatch&, const CBatchValues&, int,
        const string*, ArrowArray*, uint8_t*, CRowError*)
    CStatus CReadBatchToArrow "stateengine::ReadBatchToArrow"(
        CStateDB*, int, const CRowSchema&, const CRowVersions*, const CKeyBatch&, const string*,
        ArrowArray*, uint8_t*, CRowError*, cbool*)
    cbool CDecodeSlicesToArrow "stateengine::DecodeSlicesToArrow"(
        const CRowSchema&, const CRowVersions*, const vector[CSlice]&, int, ArrowArray*,
        CRowError*)
