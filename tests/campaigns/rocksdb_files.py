"""RocksDB's own files with their own checksums recomputed: what a writer that damaged a byte
before checksumming (a bug, a tool, a hand edit) would leave.

A checksum over a whole file (the handle's CRC-32C and size, resealed with the handle) cannot
see such damage, and neither can RocksDB's CRCs: the MANIFEST's log records
(``log_format.h``: 32 KiB blocks of records ``crc32c masked | u16 length | u8 type | data``,
the CRC over the type byte and the data) and an SST's blocks (each followed by a 5-byte
trailer ``u8 compression type | crc32c masked``, the CRC over the block and the type byte).
Only the meaning of the bytes is left to catch it. CURRENT and OPTIONS are plain text without
checksums.

Used by tests/test_untrusted_files.py and the campaign ``python -m
tests.campaigns.rocksdb_files`` (every byte of every record of a checkpoint's MANIFEST, and
bytes of each SST block, changed and resealed, each loaded in a worker process).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass

from stateengine import _native

LOG_BLOCK = 32768
LOG_HEADER = 7
RECYCLABLE_HEADER = 11
SST_TRAILER = 5
BLOCK_MAGIC = 0x88E241B785F4CFF7  # kBlockBasedTableMagicNumber
FOOTER = 53  # format_version >= 1: checksum type, two handles padded to 40 bytes, version, magic


def mask(crc: int) -> int:
    """RocksDB's (and snappy framing's) masked CRC."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


# ---- MANIFEST (log format) -----------------------------------------------------------------

@dataclass
class Record:
    offset: int   # of the header
    header: int   # header length: 7, or 11 for recyclable records
    type: int
    length: int

    @property
    def data_offset(self) -> int:
        return self.offset + self.header


def log_records(data: bytes) -> list[Record]:
    """The physical records of a log file (MANIFEST), in file order; trailers and zero padding
    at the end of a block skipped."""
    out = []
    pos = 0
    while pos + LOG_HEADER <= len(data):
        left_in_block = LOG_BLOCK - pos % LOG_BLOCK
        if left_in_block < LOG_HEADER:
            pos += left_in_block
            continue
        length = data[pos + 4] | (data[pos + 5] << 8)
        rtype = data[pos + 6]
        if rtype == 0 and length == 0:  # preallocated zeros or block padding
            pos += left_in_block
            continue
        header = RECYCLABLE_HEADER if rtype >= 5 and rtype <= 8 else LOG_HEADER
        if pos + header + length > len(data):
            break
        out.append(Record(pos, header, rtype, length))
        pos += header + length
    return out


def reseal_record(data: bytearray, rec: Record) -> None:
    """Recomputes a record's CRC in place (over the type byte, a recyclable record's log number
    and the data)."""
    covered = bytes(data[rec.offset + 6:rec.data_offset + rec.length])
    struct.pack_into("<I", data, rec.offset, mask(_native.crc32c(covered)))


def manifest_with(data: bytes, rec: Record, index: int, value: int) -> bytes:
    """data with byte ``index`` of record ``rec``'s data set to value, the record resealed."""
    out = bytearray(data)
    out[rec.data_offset + index] = value
    reseal_record(out, rec)
    return bytes(out)


def manifest_appended(data: bytes, payload: bytes) -> bytes:
    """data with one more full record (type 1) holding payload, CRC and all: RocksDB replays
    it as the newest VersionEdit. (The MANIFESTs here are far below one 32 KiB block.)"""
    if (len(data) % LOG_BLOCK) + LOG_HEADER + len(payload) > LOG_BLOCK:
        raise ValueError("the record would cross a log block")
    head = bytearray(struct.pack("<IHB", 0, len(payload), 1)) + payload
    rec = Record(0, LOG_HEADER, 1, len(payload))
    reseal_record(head, rec)
    return data + bytes(head)


# VersionEdit tags (db/version_edit.h): a varint tag, then the field.
TAG_LAST_SEQUENCE = 4


# ---- SST (block-based table) ---------------------------------------------------------------

def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _checksum(kind: int, block: bytes, block_type: int) -> int:
    """A block trailer's checksum of the footer's checksum type (table/format.cc): CRC-32C
    (1, masked) or XXH3 (4, RocksDB's default: the low 32 bits over the block, the type byte
    folded in by a multiply)."""
    if kind == 1:
        return mask(_native.crc32c(block + bytes([block_type])))
    if kind == 4:
        import xxhash

        return (xxhash.xxh3_64_intdigest(block) & 0xFFFFFFFF) ^ \
            ((block_type * 0x6B9083D9) & 0xFFFFFFFF)
    raise ValueError(f"block checksum type {kind} is not supported here")


def _block_handles(block: bytes, lengths: bool) -> list[tuple[int, int]]:
    """The block handles an index block (``lengths`` False: values without a length, as
    format_version >= 4 writes them, one restart per entry) or a metaindex block holds."""
    restarts = struct.unpack_from("<I", block, len(block) - 4)[0] & 0x7FFFFFFF
    end = len(block) - 4 - 4 * restarts
    out, pos = [], 0
    while pos < end:
        _, pos = _varint(block, pos)         # shared key bytes
        unshared, pos = _varint(block, pos)
        if lengths:
            _, pos = _varint(block, pos)     # value length
        pos += unshared
        offset, pos = _varint(block, pos)
        size, pos = _varint(block, pos)
        out.append((offset, size))
    return out


def first_key_trailer(data: bytes, block: tuple[int, int]) -> int:
    """Offset in data of the 8-byte internal-key trailer (``seq << 8 | value type``, little
    endian, so the type is its first byte) of the first entry of an uncompressed data block."""
    offset, size = block
    if data[offset + size] != 0:
        raise ValueError("the block is compressed")
    pos = offset
    shared, pos = _varint(data, pos)
    unshared, pos = _varint(data, pos)
    _, pos = _varint(data, pos)  # value length
    if shared != 0 or unshared < 8:
        raise ValueError("not the first entry of a data block")
    return pos + unshared - 8


def sst_checksum_type(data: bytes) -> int:
    if len(data) < FOOTER or struct.unpack_from("<Q", data, len(data) - 8)[0] != BLOCK_MAGIC:
        raise ValueError("not a block-based table (no magic number)")
    return data[len(data) - FOOTER]


def sst_blocks(data: bytes) -> list[tuple[int, int]]:
    """(offset, size) of every block of an SST file (data blocks from the index, meta blocks
    from the metaindex, then those two; size without the 5-byte trailer), in file order."""
    sst_checksum_type(data)
    footer = len(data) - FOOTER + 1
    meta_off, pos = _varint(data, footer)
    meta_size, pos = _varint(data, pos)
    index_off, pos = _varint(data, pos)
    index_size, pos = _varint(data, pos)
    index = data[index_off:index_off + index_size]
    metaindex = data[meta_off:meta_off + meta_size]
    blocks = set(_block_handles(index, lengths=False)) | set(_block_handles(metaindex, True))
    blocks |= {(meta_off, meta_size), (index_off, index_size)}
    return sorted(blocks)


def reseal_block(data: bytearray, offset: int, size: int) -> None:
    """Recomputes a block's trailer checksum in place."""
    kind = sst_checksum_type(bytes(data))
    value = _checksum(kind, bytes(data[offset:offset + size]), data[offset + size])
    struct.pack_into("<I", data, offset + size + 1, value)


def sst_with(data: bytes, block: tuple[int, int], index: int, value: int) -> bytes:
    """data with byte ``index`` of a block (its type byte when index == size) set to value,
    the block's trailer resealed."""
    offset, size = block
    out = bytearray(data)
    out[offset + index] = value
    reseal_block(out, offset, size)
    return bytes(out)


# ---- a checkpoint with one file replaced, its handle resealed --------------------------------

def replace_file(root: str, manifest_rel: str, rel: str, new: bytes) -> None:
    """Writes new as the checkpoint file rel and records its size and CRC-32C in the handle
    manifest_rel (and its total in the upload figures), resealed (no key): the damage is then
    behind every checksum and every cross-check of the handle."""
    from tests.campaigns import mutations

    mutations.rewrite(os.path.join(root, rel), new)
    crc, size = _native.crc32c(new), len(new)

    def change(doc: dict) -> None:
        for ref in doc.get("shared", []) + doc.get("private", []):
            if ref["path"] == rel:
                if isinstance(doc.get("stats"), dict) and "bytes_total" in doc["stats"]:
                    doc["stats"]["bytes_total"] += size - ref["size"]  # the figures agree too
                ref["crc32c"], ref["size"] = crc, size
    doc_path = os.path.join(root, manifest_rel)
    mutations.rewrite(doc_path, mutations.resealed(open(doc_path, "rb").read(), change))


def rocksdb_files(root: str, manifest_rel: str) -> dict[str, str]:
    """local name -> checkpoint path of the RocksDB files an incremental handle lists."""
    doc = json.load(open(os.path.join(root, manifest_rel)))
    return {f["local_name"]: f["path"] for f in doc["shared"] + doc["private"]}


# ---- the campaign ---------------------------------------------------------------------------

def _file_kind(case: str) -> str:
    """MANIFEST, CURRENT, OPTIONS or sst, from a case's description."""
    name = case.split(" ", 1)[0]
    return "sst" if name.endswith(".sst") else name.split("-")[0]


def _cases(root: str, manifest_rel: str, rng: random.Random, sst_per_block: int,
           values: tuple[int, ...]) -> list[tuple[str, str, bytes]]:
    """(description, checkpoint path, new bytes) of every case."""
    cases = []
    for local, rel in sorted(rocksdb_files(root, manifest_rel).items()):
        data = open(os.path.join(root, rel), "rb").read()
        if local.startswith("MANIFEST"):
            for r, rec in enumerate(log_records(data)):
                for i in range(rec.length):
                    for v in sorted({data[rec.data_offset + i] ^ x for x in values}):
                        cases.append((f"{local} record {r} byte {i} = {v:#04x}", rel,
                                      manifest_with(data, rec, i, v)))
        elif local.endswith(".sst"):
            for b, block in enumerate(sst_blocks(data)):
                for i in rng.sample(range(block[1] + 1), min(sst_per_block, block[1] + 1)):
                    v = data[block[0] + i] ^ rng.choice(values)
                    cases.append((f"{local} block {b} byte {i} = {v:#04x}", rel,
                                  sst_with(data, block, i, v)))
        else:  # CURRENT, OPTIONS: text without a checksum of their own
            for i in rng.sample(range(len(data)), min(len(data), 64)):
                v = data[i] ^ rng.choice(values)
                new = bytearray(data)
                new[i] = v
                cases.append((f"{local} byte {i} = {v:#04x}", rel, bytes(new)))
    return cases


def case_from(root: str, manifest_rel: str, what: str) -> tuple[str, str, bytes]:
    """A case from its description ("000019.sst block 0 byte 37 = 0x11", "MANIFEST-000005
    record 9 byte 7 = 0x2e"), for replaying what a campaign found."""
    name, unit, index, _, at, _, value = what.split()
    rel = rocksdb_files(root, manifest_rel)[name]
    data = open(os.path.join(root, rel), "rb").read()
    if unit == "record":
        return what, rel, manifest_with(data, log_records(data)[int(index)], int(at), int(value, 16))
    return what, rel, sst_with(data, sst_blocks(data)[int(index)], int(at), int(value, 16))


def run(seed: int = 1, limit: int | None = None, sst_per_block: int = 16,
        workdir: str | None = None, progress: bool = False,
        files: tuple[str, ...] = ("MANIFEST", "CURRENT", "OPTIONS", "sst"),
        replay: list[str] | None = None) -> dict:
    """Loads the incremental checkpoint of tests/campaigns/checkpoints.py once per case in a
    worker process; classifies each outcome like corruption.py (identical, corruption, error,
    wrong, raw, crash, timeout)."""
    from tests.campaigns.checkpoints import KINDS
    from tests.campaigns.corruption import Worker, _plain

    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="stateengine-rocksdb-files-")
    started = time.monotonic()
    try:
        kind = KINDS["incremental"]
        pristine_root = os.path.join(workdir, "pristine", "incremental")
        os.makedirs(pristine_root)
        kind.build(pristine_root, os.path.join(workdir, "scratch-build"))
        work_root = os.path.join(workdir, "work", "incremental")
        shutil.copytree(pristine_root, work_root)
        scratch = os.path.join(workdir, "scratch-pristine")
        with open(os.path.join(workdir, "pristine.json"), "w") as f:
            json.dump({"incremental:None": _plain(kind.load(work_root, scratch))}, f)
        shutil.rmtree(scratch, ignore_errors=True)
        manifest_rel = kind.manifest(pristine_root)
        rng = random.Random(seed)
        if replay is not None:
            cases = [case_from(pristine_root, manifest_rel, what) for what in replay]
        else:
            cases = _cases(pristine_root, manifest_rel, rng, sst_per_block,
                           (0x01, 0x80, 0xFF, 0x10))
            cases = [c for c in cases if _file_kind(c[0]) in files]
            rng.shuffle(cases)
        if limit is not None:
            cases = cases[:limit]
        worker = Worker(workdir, 2 << 30)
        outcomes: Counter = Counter()
        by_file: dict[str, Counter] = {}
        bad, wrong = [], []
        try:
            for n, (what, rel, new) in enumerate(cases):
                replace_file(work_root, manifest_rel, rel, new)
                try:
                    cls, detail = worker.load("incremental", None, 120.0)
                finally:
                    for r in (rel, manifest_rel):
                        shutil.copyfile(os.path.join(pristine_root, r), os.path.join(work_root, r))
                outcomes[cls] += 1
                by_file.setdefault(_file_kind(what), Counter())[cls] += 1
                if cls in ("crash", "raw", "timeout"):
                    bad.append({"case": what, "class": cls, "detail": detail[:400]})
                elif cls == "wrong" and len(wrong) < 30:
                    wrong.append({"case": what, "detail": detail[:300]})
                if progress and (n + 1) % 200 == 0:
                    print(f"{n + 1}/{len(cases)} {dict(outcomes)} "
                          f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        finally:
            worker.kill()
        return {"seed": seed, "cases": len(cases), "outcomes": dict(outcomes),
                "by_file": {k: dict(v) for k, v in by_file.items()},
                "worker_starts": worker.starts, "bad": bad, "wrong_examples": wrong,
                "seconds": round(time.monotonic() - started, 1)}
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--limit", type=int, default=None, help="at most this many cases")
    p.add_argument("--sst-per-block", type=int, default=16, help="bytes tried per SST block")
    p.add_argument("--files", default="MANIFEST,CURRENT,OPTIONS,sst",
                   help="which files to damage (comma-separated)")
    args = p.parse_args(argv)
    report = run(args.seed, args.limit, args.sst_per_block, progress=True,
                 files=tuple(args.files.split(",")))
    print(json.dumps(report, indent=1))
    return 1 if report["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
