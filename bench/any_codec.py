"""Scalar cost of the default ("any") serializer: value() and update() on one hot key, and
the codec alone (encode_for_codec / decode_for_codec, no RocksDB).

    python bench/any_codec.py                          # this build
    python bench/any_codec.py --against /path/to/src   # and another build, interleaved

``--against`` takes a directory holding a built ``stateengine`` package (e.g. a worktree of
an older commit after ``setup.py build_ext --inplace``); it is imported under another name in
the same process and every measurement alternates between the two builds, round after round,
so load on a shared machine hits both alike. Each figure is the best of the rounds, in ns per
call. Primitive values (int, float, str, bool, bytes) must cost the same in both; the
container rows show what a tuple, list or dict costs.

Instruction counts do not depend on load: ``--loop CASE N`` makes N update() then N value()
calls of one case and nothing else, for callgrind (inclusive cost of each wrapper / N)::

    valgrind --tool=callgrind --toggle-collect='*NativeValueState_3value*' \
        --toggle-collect='*NativeValueState_5update*' python bench/any_codec.py --loop int 2000
    callgrind_annotate --inclusive=yes callgrind.out.<pid> | grep -E 'NativeValueState_(3value|5update)'
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import tempfile
import timeit

CASES = [
    ("int", 12345), ("float", 1.5), ("str", "hello world"), ("bool", True),
    ("bytes", b"\x00" * 16), ("tuple(3)", (1, "a", 2.5)), ("list(10)", list(range(10))),
    ("dict(3)", {"a": 1, "b": (2, 3), "c": [4.0]}), ("bigint", 2**100),
]
COLUMNS = ("update", "value", "encode", "decode")


def load_baseline(src: str):
    """The stateengine package of src, imported as ``stateengine_baseline``."""
    tmp = tempfile.mkdtemp()
    shutil.copytree(os.path.join(src, "stateengine"), os.path.join(tmp, "stateengine_baseline"))
    sys.path.insert(0, tmp)
    return importlib.import_module("stateengine_baseline")


def callables(pkg, scratch: str) -> dict:
    """(label -> {column: zero-argument callable}) for one build; None where it refuses."""
    backend = pkg.KeyedStateBackend(os.path.join(scratch, pkg.__name__), key_type=int)
    backend.set_current_key(1)
    native = pkg._native
    out = {}
    for label, value in CASES:
        state = backend.get_state(pkg.ValueStateDescriptor(f"v-{label}"))
        try:
            state.update(value)
        except Exception:  # an older build may refuse a case
            out[label] = None
            continue
        raw = native.encode_for_codec(1, value)
        out[label] = {
            "update": lambda s=state, v=value: s.update(v),
            "value": state.value,
            "encode": lambda v=value: native.encode_for_codec(1, v),
            "decode": lambda r=raw: native.decode_for_codec(1, r),
        }
    out["_backend"] = backend
    return out


def loop(pkg, label: str, n: int) -> None:
    value = dict(CASES)[label]
    backend = pkg.KeyedStateBackend(os.path.join(tempfile.mkdtemp(), "db"), key_type=int)
    backend.set_current_key(1)
    state = backend.get_state(pkg.ValueStateDescriptor("v"))
    for _ in range(n):
        state.update(value)
    for _ in range(n):
        state.value()
    backend.dispose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--against", help="directory with another built stateengine package")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--loop", nargs=2, metavar=("CASE", "N"), help="only N update() and value() "
                   "calls of one case (for callgrind)")
    p.add_argument("--number", type=int, default=50_000)
    args = p.parse_args()
    import stateengine

    if args.loop:
        return loop(stateengine, args.loop[0], int(args.loop[1]))
    builds = {"this": stateengine}
    if args.against:
        builds["other"] = load_baseline(args.against)
    scratch = tempfile.mkdtemp()
    calls = {name: callables(pkg, scratch) for name, pkg in builds.items()}
    best: dict = {}
    for _ in range(args.rounds):
        for label, _value in CASES:
            for column in COLUMNS:
                for name in builds:  # alternate builds within each measurement
                    fns = calls[name][label]
                    if fns is None:
                        continue
                    t = timeit.timeit(fns[column], number=args.number) / args.number * 1e9
                    key = (name, label, column)
                    best[key] = min(best.get(key, t), t)
    for name, pkg in builds.items():
        print(f"{name}: {os.path.dirname(pkg.__file__)}")
    header = "".join(f"{c + ' ' + n:>16}" for c in COLUMNS for n in builds)
    print(f"{'value (ns)':<12}{header}")
    for label, _value in CASES:
        cells = []
        for column in COLUMNS:
            for name in builds:
                t = best.get((name, label, column))
                cells.append(f"{'refused' if t is None else f'{t:.0f}':>16}")
        print(f"{label:<12}{''.join(cells)}")
    for name in builds:
        calls[name]["_backend"].dispose()
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
