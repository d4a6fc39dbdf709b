"""What the request guard's generated checks call at run time (``guard.py`` compiles them).

The errors a refused frame raises, the limits, the varint reader, and the tag-section walk:
tagged fields are the rare path, so they are checked here by one general function instead of
generated code. ``HELPERS`` is the namespace every generated check runs in.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = [
    "HELPERS",
    "MAX_ARRAY_ELEMENTS",
    "MAX_STRING_LENGTH",
    "MalformedRequest",
    "State",
    "Tagged",
    "encode_uvarint",
    "read_uvarint",
]

# The most array items (of all arrays together, nested ones included) one request may
# hold. kio builds a Python object per item (the guard's walk takes a fraction of a
# microsecond each, kio about as much), so this bounds a request's decode at about a
# second of CPU and a few hundred MB. Real clients stay far below: a Fetch or an
# OffsetCommit naming every partition of a 200k-partition cluster is 200k items, a
# Metadata request for 100k topics 100k.
MAX_ARRAY_ELEMENTS = 1_000_000

# Kafka refuses a (compact) string longer than this: "string field X had invalid length".
MAX_STRING_LENGTH = 0x7FFF


class MalformedRequest(Exception):
    """The frame does not hold a well-formed request of the schema; ``message`` says where."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class State:
    """What one walk carries along: items seen so far, and the edits to the frame, if any."""

    __slots__ = ("elements", "edits")

    def __init__(self) -> None:
        self.elements = 0
        # (start, end, replacement) byte ranges of the frame; None until a tag is dropped.
        self.edits: list[tuple[int, int, bytes]] | None = None


_unpack_i32 = struct.Struct(">i").unpack_from


# --------------------------------------------------------------------------- errors and helpers
# (called by the generated code; everything that raises returns the exception to raise)


def _truncated(where: str, needed: int, remaining: int) -> MalformedRequest:
    return MalformedRequest(f"{where}: needs {needed} bytes, only {max(remaining, 0)} remain")


def _fixed_error(names: tuple[tuple[int, str], ...], size: int, start: int, end: int) -> MalformedRequest:
    """The frame ends inside a run of fixed-size fields: name the field it ends in."""
    remaining = end - start
    where = next(name for offset, name in reversed(names) if offset <= max(remaining, 0))
    return _truncated(where, size, remaining)


def _null(where: str) -> MalformedRequest:
    return MalformedRequest(f"non-nullable field {where} was serialized as null")


def _negative(where: str, length: int) -> MalformedRequest:
    return MalformedRequest(f"{where}: negative length {length}")


def _too_long(where: str, length: int) -> MalformedRequest:
    return MalformedRequest(f"string field {where} had invalid length {length}")


def _too_many(where: str, count: int, remaining: int) -> MalformedRequest:
    return MalformedRequest(f"{where}: tried to read {count} elements, but only {remaining} bytes remain")


def _bad_marker(where: str, marker: int) -> MalformedRequest:
    return MalformedRequest(f"{where}: invalid presence marker {marker - 0x100}")


def _count_elements(state: State, count: int, where: str) -> None:
    state.elements += count
    if state.elements > MAX_ARRAY_ELEMENTS:
        raise MalformedRequest(f"{where}: the request holds more than {MAX_ARRAY_ELEMENTS} array elements")


def _check_utf8(buf: Any, start: int, stop: int, where: str) -> None:
    try:
        str(buf[start:stop], "utf-8")
    except UnicodeDecodeError:
        raise MalformedRequest(f"string field {where} is not valid UTF-8") from None


def read_uvarint(buf: Any, pos: int, end: int, where: str) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (Kafka's and kio's limit) and the position after it."""
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise _truncated(where, 1, 0)
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift == 35:
            raise MalformedRequest(f"{where}: varint is longer than 5 bytes")


def encode_uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# --------------------------------------------------------------------------- tagged fields (the rare path)


class Tagged:
    __slots__ = ("where", "check", "null_is_default")

    def __init__(self, where: str, check: Any, null_is_default: bool) -> None:
        self.where = where
        self.check = check
        # A nullable string/bytes whose default is None: null on the wire means "absent".
        self.null_is_default = null_is_default


def _tagged_section(buf: Any, pos: int, end: int, state: State, owner: str, known: dict[int, Tagged]) -> int:
    """A tag section with at least one field (the generated code handles the empty one)."""
    where_count = f"{owner} tagged fields"
    section_start = pos
    count, pos = read_uvarint(buf, pos, end, where_count)
    count_end = pos
    if count * 2 > end - pos:  # each tagged field takes at least a tag and a size byte
        raise _too_many(where_count, count, end - pos)
    dropped: list[tuple[int, int, bytes]] = []
    for _ in range(count):
        field_start = pos
        tag, pos = read_uvarint(buf, pos, end, where_count)
        size_start = pos
        size, pos = read_uvarint(buf, pos, end, f"{owner} tagged field {tag}")
        size_end = pos
        stop = pos + size
        if stop > end:
            raise _truncated(f"{owner} tagged field {tag}", size, end - pos)
        field = known.get(tag)
        if field is None:  # KIP-482: a receiver skips the tags it does not know
            dropped.append((field_start, stop, b""))
            pos = stop
            continue
        if field.null_is_default and read_uvarint(buf, pos, stop, field.where)[0] == 0:
            dropped.append((field_start, stop, b""))
            pos = stop
            continue
        edits_before = len(state.edits) if state.edits else 0
        taken = field.check(buf, pos, stop, state) - pos
        if taken != size:
            raise MalformedRequest(
                f"tagged field {field.where} (tag {tag}) declared {size} bytes but its value takes {taken}"
            )
        if state.edits and len(state.edits) > edits_before:
            # Something was dropped inside this field: its declared size shrinks by as much.
            removed = sum(e - s - len(r) for s, e, r in state.edits[edits_before:])
            state.edits.append((size_start, size_end, encode_uvarint(size - removed)))
        pos = stop
    if dropped:
        if state.edits is None:
            state.edits = []
        state.edits.append((section_start, count_end, encode_uvarint(count - len(dropped))))
        state.edits.extend(dropped)
    return pos


HELPERS: dict[str, Any] = {
    "MalformedRequest": MalformedRequest,
    "read_uvarint": read_uvarint,
    "_truncated": _truncated,
    "_fixed_error": _fixed_error,
    "_null": _null,
    "_negative": _negative,
    "_too_long": _too_long,
    "_too_many": _too_many,
    "_bad_marker": _bad_marker,
    "_count_elements": _count_elements,
    "_check_utf8": _check_utf8,
    "_tagged_section": _tagged_section,
    "_unpack_i32": _unpack_i32,
}
