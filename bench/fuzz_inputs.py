"""What bench/fuzz_requests.py feeds the decoder: valid requests built from kio's schemas (random
values of each field's type, nullable fields sometimes null, unknown tagged fields sometimes
added), the mutations applied to them, and the checks a decoded request must pass (no None where
the schema does not allow it; encodes again to an equal request)."""

from __future__ import annotations

import datetime as dt
import random
import struct
import uuid
from collections.abc import Callable
from dataclasses import MISSING, fields
from functools import cache
from typing import Any

from shoal.protocol.guard import encode_uvarint

MAX_FRAME = 1 << 20  # largest input: a mutated frame is cut there (the worker's shared "current input" file)


# --------------------------------------------------------------------------- valid requests


def _schema_helpers() -> Any:
    from kio.serial import _introspect

    return _introspect


def _nullable_top(field: Any) -> bool:
    from types import NoneType, UnionType
    from typing import Union, get_args, get_origin

    return get_origin(field.type) in (UnionType, Union) and NoneType in get_args(field.type)


_INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint8": (0, (1 << 8) - 1),
    "uint16": (0, (1 << 16) - 1),
    "uint32": (0, (1 << 32) - 1),
    "uint64": (0, (1 << 64) - 1),
}
_TEXT = "abcdefghijklmnopqrstuvwxyz0123456789._-" + "éøß€中文🙂"


def random_primitive(kafka_type: str, rng: random.Random) -> Any:
    """A random value of a kafka_type that kio writes and reads back equal."""
    if kafka_type in _INT_RANGES:
        low, high = _INT_RANGES[kafka_type]
        return rng.choice((low, high, 0, -1 if low < 0 else 1, rng.randint(low, high), rng.randint(0, 100)))
    if kafka_type == "bool":
        return rng.random() < 0.5
    if kafka_type == "float64":
        return rng.uniform(-1e9, 1e9)
    if kafka_type == "string":
        return "".join(rng.choice(_TEXT) for _ in range(rng.choice((0, 1, 3, 8, 20, 60))))
    if kafka_type in ("bytes", "records"):
        return rng.randbytes(rng.choice((0, 1, 8, 61, 300)))
    if kafka_type == "uuid":
        return uuid.UUID(int=rng.getrandbits(128) | 1)
    if kafka_type == "timedelta_i32":
        return dt.timedelta(milliseconds=rng.randint(-(1 << 31), (1 << 31) - 1))
    if kafka_type == "timedelta_i64":
        return dt.timedelta(milliseconds=rng.randint(-(10**15), 10**15))
    if kafka_type == "datetime_i64":
        return dt.datetime.fromtimestamp(rng.randint(0, 4_000_000_000), dt.UTC)
    if kafka_type == "error_code":
        from kio.schema.errors import ErrorCode

        return rng.choice(list(ErrorCode))
    raise ValueError(f"no generator for kafka_type {kafka_type!r}")


def random_entity(cls: type, rng: random.Random, depth: int = 0) -> Any:
    """A random instance of a kio entity class, every field drawn from its schema."""
    intro = _schema_helpers()
    values: dict[str, Any] = {}
    for field in fields(cls):
        has_default = field.default is not MISSING or field.default_factory is not MISSING
        if intro.get_field_tag(field) is not None and has_default and rng.random() < 0.4:
            continue  # a tagged field left out: its default
        kind = intro.classify_field(field)
        if isinstance(kind, intro.PrimitiveField):
            if intro.is_optional(field) and rng.random() < 0.25:
                values[field.name] = None
            else:
                values[field.name] = random_primitive(intro.get_schema_field_type(field), rng)
        elif isinstance(kind, intro.EntityField):
            nullable = intro.is_optional(field)
            values[field.name] = None if nullable and rng.random() < 0.3 else random_entity(kind.type_, rng, depth + 1)
        else:
            if _nullable_top(field) and rng.random() < 0.2:
                values[field.name] = None
                continue
            count = rng.choice((0, 1, 1, 2, 3)) if depth < 3 else rng.choice((0, 1))
            if isinstance(kind, intro.EntityTupleField):
                values[field.name] = tuple(random_entity(kind.type_, rng, depth + 1) for _ in range(count))
            else:
                kafka_type = intro.get_schema_field_type(field)
                values[field.name] = tuple(random_primitive(kafka_type, rng) for _ in range(count))
    return cls(**values)


def _top_level_tags_empty(request: Any) -> bool:
    """Whether the request's own tagged fields are all at their defaults (kio writes none then)."""
    intro = _schema_helpers()
    for field in fields(type(request)):
        tagged = intro.get_field_tag(field) is not None
        if tagged and (field.default is MISSING or getattr(request, field.name) != field.default):
            return False
    return True


def with_unknown_tags(frame: bytes, request: Any, rng: random.Random) -> bytes | None:
    """``frame`` with an unknown tagged field added to the header's and the body's tag sections.

    The body's own tag section is its last byte when none of its tagged fields is set; the
    header's follows the (int16-length) client id. None when neither can take one.
    """
    cls = type(request)
    out = frame
    tag = rng.choice((90, 200, 4000, 1 << 20))
    payload = rng.randbytes(rng.choice((0, 1, 5, 40)))
    field = encode_uvarint(tag) + encode_uvarint(len(payload)) + payload
    changed = False
    if cls.__flexible__ and _top_level_tags_empty(request):
        assert out[-1] == 0
        out = out[:-1] + b"\x01" + field
        changed = True
    if cls.__header_schema__.__flexible__:
        client_id_length = struct.unpack_from(">h", out, 8)[0]
        at = 10 + max(client_id_length, 0)
        if out[at] == 0:
            out = out[:at] + b"\x01" + field + out[at + 1 :]
            changed = True
    return out if changed else None


# --------------------------------------------------------------------------- sanity of decoded requests


@cache
def _field_rules(cls: type) -> tuple[tuple[str, bool, str, type | None], ...]:
    """(name, may_be_none, kind, entity_class) per field: what a decoded request must respect."""
    intro = _schema_helpers()
    rules = []
    for field in fields(cls):
        kind = intro.classify_field(field)
        if cls.__name__ == "RequestHeader" and field.name == "client_id":
            rules.append((field.name, True, "value", None))
        elif isinstance(kind, intro.PrimitiveField):
            rules.append((field.name, intro.is_optional(field), "value", None))
        elif isinstance(kind, intro.EntityField):
            rules.append((field.name, intro.is_optional(field), "entity", kind.type_))
        elif isinstance(kind, intro.EntityTupleField):
            rules.append((field.name, _nullable_top(field), "entities", kind.type_))
        else:
            rules.append((field.name, _nullable_top(field), "values", None))
    return tuple(rules)


def insane(obj: Any, cls: type, path: str = "") -> str | None:
    """Why a decoded entity breaks its schema (a None where none may be), or None if it does not."""
    if type(obj) is not cls:
        return f"{path or cls.__name__} is a {type(obj).__name__}, not a {cls.__name__}"
    for name, may_be_none, kind, entity in _field_rules(cls):
        value = getattr(obj, name)
        where = f"{path or cls.__name__}.{name}"
        if value is None:
            if not may_be_none:
                return f"non-nullable {where} decoded as None"
            continue
        if kind == "entity":
            problem = insane(value, entity, where)  # type: ignore[arg-type]
            if problem:
                return problem
        elif kind in ("entities", "values"):
            if type(value) is not tuple:
                return f"{where} decoded as {type(value).__name__}, not a tuple"
            for index, item in enumerate(value):
                if item is None:
                    return f"{where}[{index}] decoded as None"
                if kind == "entities":
                    problem = insane(item, entity, f"{where}[{index}]")  # type: ignore[arg-type]
                    if problem:
                        return problem
    return None


_FLOAT_EXACT_MS = 1 << 53


def equal_but_for_float_ms(a: Any, b: Any) -> bool:
    """Whether two decoded requests differ only in timedeltas beyond 2^53 ms, by at most 1 ms."""
    if isinstance(a, dt.timedelta) and isinstance(b, dt.timedelta):
        return a == b or (abs(a - b) <= dt.timedelta(milliseconds=1) and abs(a) >= dt.timedelta(milliseconds=_FLOAT_EXACT_MS))
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(equal_but_for_float_ms(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "__dataclass_fields__"):
        return all(equal_but_for_float_ms(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))
    return a == b


# --------------------------------------------------------------------------- mutations

_INTERESTING16 = (0x0000, 0x7FFF, 0x8000, 0xFFFF, 0xFFFE, 0x0001)
INTERESTING32 = (0x00000000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x00010000, 0x00000100)
FILL_BYTES = (0xFF, 0x7F, 0x80, 0x00, 0xFE, 0x01)

Mutation = Callable[[bytearray, random.Random, list[bytes]], None]


def _pos(frame: bytearray, rng: random.Random, protect: int) -> int:
    low = min(protect, len(frame))
    return rng.randint(low, max(low, len(frame) - 1)) if len(frame) > low else len(frame)


def _flip(frame: bytearray, rng: random.Random, protect: int) -> None:
    for _ in range(rng.randint(1, 4)):
        if len(frame) > protect:
            at = _pos(frame, rng, protect)
            frame[at] ^= 1 << rng.randint(0, 7)


def _insert(frame: bytearray, rng: random.Random, protect: int) -> None:
    at = _pos(frame, rng, protect)
    frame[at:at] = bytes(rng.choice(FILL_BYTES) if rng.random() < 0.5 else rng.randint(0, 255) for _ in range(rng.randint(1, 6)))


def _delete(frame: bytearray, rng: random.Random, protect: int) -> None:
    if len(frame) > protect:
        at = _pos(frame, rng, protect)
        del frame[at : at + rng.randint(1, 4)]


def _truncate(frame: bytearray, rng: random.Random, protect: int) -> None:
    del frame[_pos(frame, rng, protect) :]


def _overwrite(frame: bytearray, rng: random.Random, protect: int) -> None:
    at = _pos(frame, rng, protect)
    count = rng.randint(1, 5)
    if rng.random() < 0.3:  # a run of varint continuation bytes, optionally terminated
        run = bytes([0x80 | rng.randint(0, 0x7F) for _ in range(count)]) + (b"\x0f" if rng.random() < 0.5 else b"")
    else:
        run = bytes([rng.choice(FILL_BYTES)]) * count
    frame[at : at + len(run)] = run


def _integer(frame: bytearray, rng: random.Random, protect: int) -> None:
    at = _pos(frame, rng, protect)
    if rng.random() < 0.5:
        frame[at : at + 2] = struct.pack(">H", rng.choice(_INTERESTING16))
    else:
        frame[at : at + 4] = struct.pack(">I", rng.choice(INTERESTING32))


def _splice(frame: bytearray, rng: random.Random, protect: int, others: list[bytes]) -> None:
    other = rng.choice(others)
    start = rng.randint(0, max(0, len(other) - 1))
    chunk = other[start : start + rng.randint(1, 32)]
    at = _pos(frame, rng, protect)
    if rng.random() < 0.5:
        frame[at:at] = chunk
    else:
        frame[at : at + len(chunk)] = chunk


def _duplicate(frame: bytearray, rng: random.Random, protect: int) -> None:
    at = _pos(frame, rng, protect)
    chunk = frame[at : at + rng.randint(1, 16)]
    frame[at:at] = chunk


_SIMPLE = (_flip, _insert, _delete, _truncate, _overwrite, _overwrite, _integer, _duplicate)


def mutate(frame: bytes, rng: random.Random, others: list[bytes]) -> bytes:
    """1-3 random mutations of ``frame``; the API key and version (first 4 bytes) mostly kept."""
    out = bytearray(frame)
    protect = 4 if rng.random() < 0.95 else 0
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        if rng.random() < 0.1:
            _splice(out, rng, protect, others)
        else:
            rng.choice(_SIMPLE)(out, rng, protect)
    return bytes(out[: MAX_FRAME])
