"""Operator state: list state per parallel instance (not per key), as in Flink.

When the parallelism changes, each list state is redistributed by its mode:

- ``"split"`` (Flink's even-split redistribution): the lists of all old instances are
  concatenated in instance order and cut into ``parallelism`` contiguous, near-equal parts;
  instance ``i`` gets part ``i``.
- ``"union"``: every new instance gets the concatenation of all old lists.

Operator state is held in memory (it is meant to be small: offsets, watermarks, buffers) and
written to one file next to the keyed state of each snapshot or checkpoint. Elements are
values of the default "any" serializer (None is refused): primitives, numpy scalars, and
tuples, lists and dicts of them.

File format 3 (big-endian; every length is checked against the bytes left)::

    b"SEOS" | u16 format | u32 operator index | u32 parallelism | u32 n states
    per state: u16 name length | UTF-8 name | u8 mode (0 split, 1 union)
               | u32 body length | body: the elements as one ANY-encoded list
    u32 CRC-32C of every byte before it

The CRC is the file's own check, taken when the bytes are made: the checkpoint's handle
records a CRC-32C of the file as stored too, but damage done before that one was taken (or a
handle resealed over damaged bytes) would otherwise restore as different elements, since
most byte changes of an ANY body still decode. Format 2 is the same without the CRC (read
too). Format 1 files (stateengine before format 2) are a pickle; they are read only with
``allow_pickle=True``, since unpickling runs code from the file.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any, Iterable

from . import _native
from .errors import (CorruptionError, IllegalStoreStateError, PickleNotAllowedError,
                     SerializationError, StateRegistrationError)

MODES = ("split", "union")
MAGIC = b"SEOS"
FORMAT = 3
_UNCHECKED_FORMAT = 2  # format 3 without the trailing CRC-32C
_LEGACY_FORMAT = 1  # a pickle of (1, operator index, parallelism, {name: (mode, elements)})
_HEADER = struct.Struct(">4sHIII")
_CRC = struct.Struct(">I")
_STATE_HEAD = struct.Struct(">H")
_STATE_BODY = struct.Struct(">BI")
_ANY = 1  # codec id of the default serializer (serializers.Codec.ANY)


def _encode_elements(name: str, elements: list[Any]) -> bytes:
    try:
        return _native.encode_for_codec(_ANY, elements)
    except SerializationError as e:
        raise SerializationError(f"operator state '{name}': {e}") from None


class OperatorListState:
    """A list owned by one parallel instance: ``get``, ``add``, ``add_all``, ``update``,
    ``clear``."""

    def __init__(self, name: str, mode: str, elements: list[Any] | None = None,
                 owner: "OperatorStateBackend | None" = None) -> None:
        self.name = name
        self.mode = mode
        self._elements: list[Any] = list(elements or [])
        self._owner = owner

    def _check_writable(self) -> None:
        if self._owner is not None and self._owner._sealed is not None:
            raise IllegalStoreStateError(self._owner._sealed)

    def get(self) -> list[Any]:
        """A copy of the elements."""
        return list(self._elements)

    def add(self, value: Any) -> None:
        """Appends one element (not None; a value the snapshot format cannot store is
        refused now)."""
        self._check_writable()
        if value is None:
            raise ValueError(f"operator list state '{self.name}' does not accept None")
        _encode_elements(self.name, [value])  # refuse what a snapshot could not store, now
        self._elements.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        """Appends every element, or none of them when one is refused."""
        self._check_writable()
        values = list(values)
        if any(v is None for v in values):
            raise ValueError(f"operator list state '{self.name}' does not accept None; nothing added")
        _encode_elements(self.name, values)
        self._elements.extend(values)

    def update(self, values: Iterable[Any]) -> None:
        """Replaces the elements, or leaves them when one of the new ones is refused."""
        self._check_writable()
        values = list(values)
        if any(v is None for v in values):
            raise ValueError(f"operator list state '{self.name}' does not accept None; not updated")
        _encode_elements(self.name, values)
        self._elements = values

    def clear(self) -> None:
        """Removes every element."""
        self._check_writable()
        self._elements = []


class OperatorStateBackend:
    """The operator states of one parallel instance (``operator_index`` of ``parallelism``)."""

    def __init__(self, operator_index: int = 0, parallelism: int = 1) -> None:
        self.operator_index = operator_index
        self.parallelism = parallelism
        self._states: dict[str, OperatorListState] = {}
        self._sealed: str | None = None  # why writes are refused (a finished StateStore)

    def get_list_state(self, name: str, mode: str = "split") -> OperatorListState:
        """The list state ``name``; ``mode`` is its redistribution: "split" or "union"."""
        if mode not in MODES:
            raise StateRegistrationError(f"operator state mode must be one of {MODES}, got {mode!r}")
        state = self._states.get(name)
        if state is None:
            state = self._states[name] = OperatorListState(name, mode, owner=self)
        elif state.mode != mode:
            raise StateRegistrationError(
                f"operator state '{name}' is registered with mode '{state.mode}', not '{mode}'")
        return state

    @property
    def state_names(self) -> list[str]:
        """The names of the registered operator states."""
        return list(self._states)

    def is_empty(self) -> bool:
        """Whether no operator state is registered."""
        return not self._states

    def snapshot_bytes(self) -> bytes:
        """The operator state file (format 3): no pickle, every element ANY-encoded, a
        CRC-32C of the whole at the end."""
        out = [_HEADER.pack(MAGIC, FORMAT, self.operator_index, self.parallelism,
                            len(self._states))]
        for name, s in self._states.items():
            raw = name.encode("utf-8")
            body = _encode_elements(name, s.get())
            out += [_STATE_HEAD.pack(len(raw)), raw,
                    _STATE_BODY.pack(MODES.index(s.mode), len(body)), body]
        data = b"".join(out)
        return data + _CRC.pack(_native.crc32c(data))

    @classmethod
    def restore(cls, snapshots: list[bytes], operator_index: int, parallelism: int,
                source: str = "operator state",
                allow_pickle: bool = False) -> "OperatorStateBackend":
        """Redistributes the snapshots of all old instances to instance ``operator_index``.
        Format 1 files (pickles) are read only with ``allow_pickle=True``."""
        decoded = [_decode(data, source, allow_pickle) for data in snapshots]
        decoded.sort(key=lambda t: t[0])
        backend = cls(operator_index, parallelism)
        names: dict[str, str] = {}
        for _, payload in decoded:
            for name, (mode, _) in payload.items():
                if names.setdefault(name, mode) != mode:
                    raise CorruptionError(f"{source}: operator state '{name}' has two modes")
        for name, mode in names.items():
            everything = [e for _, payload in decoded for e in payload.get(name, (mode, []))[1]]
            if mode == "union":
                mine = everything
            else:
                mine = even_split(everything, parallelism)[operator_index]
            backend._states[name] = OperatorListState(name, mode, mine, owner=backend)
        return backend


def _decode(data: bytes, source: str,
            allow_pickle: bool) -> tuple[int, dict[str, tuple[str, list[Any]]]]:
    """(old operator index, {name: (mode, elements)}) of one operator state file."""
    if data[:4] != MAGIC:
        if data[:1] == b"\x80":  # the PROTO opcode a format 1 pickle starts with
            return _decode_legacy(data, source, allow_pickle)
        raise CorruptionError(f"{source}: unreadable operator state (not a stateengine "
                              f"operator state file)")
    try:
        _, fmt, old_index, _old_p, n = _HEADER.unpack_from(data)
        if fmt == FORMAT:
            # checked before anything is decoded: a damaged body must not reach the decoder
            if len(data) < _HEADER.size + _CRC.size:
                raise ValueError("the file is shorter than its header and checksum")
            (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
            data = data[:-_CRC.size]
            if crc != _native.crc32c(data):
                raise ValueError("its CRC-32C does not match its contents")
        elif fmt != _UNCHECKED_FORMAT:
            raise ValueError(f"operator state format {fmt} is not supported (this build reads "
                             f"{FORMAT} and {_UNCHECKED_FORMAT}, and {_LEGACY_FORMAT} with "
                             f"allow_pickle)")
        pos = _HEADER.size
        if n > (len(data) - pos) // (_STATE_HEAD.size + _STATE_BODY.size):
            raise ValueError(f"{n} states cannot fit in {len(data)} bytes")
        payload: dict[str, tuple[str, list[Any]]] = {}
        for _ in range(n):
            (name_len,) = _STATE_HEAD.unpack_from(data, pos)
            pos += _STATE_HEAD.size
            name = data[pos:pos + name_len].decode("utf-8")
            if len(name.encode("utf-8")) != name_len or name in payload:
                raise ValueError("a state name is truncated or repeated")
            pos += name_len
            mode, body_len = _STATE_BODY.unpack_from(data, pos)
            pos += _STATE_BODY.size
            if mode >= len(MODES) or body_len > len(data) - pos:
                raise ValueError(f"state '{name}' has mode {mode} or a body past the end")
            elements = _native.decode_for_codec(_ANY, data[pos:pos + body_len])
            if type(elements) is not list or any(e is None for e in elements):
                raise ValueError(f"state '{name}' does not hold a list of elements")
            payload[name] = (MODES[mode], elements)
            pos += body_len
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} bytes follow the last state")
    except (struct.error, UnicodeDecodeError, ValueError, CorruptionError) as e:
        raise CorruptionError(f"{source}: corrupted operator state ({e})") from None
    return old_index, payload


def _decode_legacy(data: bytes, source: str,
                   allow_pickle: bool) -> tuple[int, dict[str, tuple[str, list[Any]]]]:
    if not allow_pickle:
        raise PickleNotAllowedError(
            f"{source}: operator state written by stateengine before format 2 is a pickle, and "
            f"unpickling runs code from the checkpoint; it was not unpickled. Restore with "
            f"allow_pickle=True if you trust the checkpoint (the next snapshot writes it in "
            f"format 2, without pickle)")
    try:
        fmt, old_index, _old_p, payload = pickle.loads(data)  # allowed: the reader opted in
    except Exception as e:
        raise CorruptionError(f"{source}: unreadable operator state ({e})") from None
    if fmt != _LEGACY_FORMAT:
        raise CorruptionError(f"{source}: operator state format {fmt} is not supported")
    if not isinstance(payload, dict) or not all(
            isinstance(v, tuple) and len(v) == 2 and v[0] in MODES and isinstance(v[1], list)
            for v in payload.values()):
        raise CorruptionError(f"{source}: operator state does not map names to (mode, list)")
    return old_index, payload


def even_split(elements: list[Any], parts: int) -> list[list[Any]]:
    """Contiguous parts whose sizes differ by at most one, the larger ones first."""
    base, extra = divmod(len(elements), parts)
    out, pos = [], 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        out.append(elements[pos:pos + n])
        pos += n
    return out
