"""A schema-driven check of a request frame, run before kio decodes it.

kio's native reader trusts what the frame says about itself: an array count is handed to
``Vec::with_capacity`` before a single element is read (a Metadata request whose topics
array claims 2^32-2 entries asks for 34 GB and aborts the process); arrays, strings and
structs the schema does not allow to be null come back as None; an unknown tagged field
raises KeyError, where KIP-482 says a receiver skips it. This module walks the frame
with the same schema (kio's dataclasses and its own introspection helpers, read the way
kio's ``build_field_schema`` reads them) and applies the rules of Kafka's generated
readers (``MessageDataGenerator``, e.g. ``MetadataRequestData.read``):

- every count and length is checked against the bytes that remain *before* anything is
  read or allocated ("Tried to read N elements, but only M bytes remain"); an array of
  fixed-size items is checked as ``count * size <= remaining`` with no loop, an array of
  structs as ``count * smallest_item <= remaining``;
- an unsigned varint is at most 5 bytes; a negative length other than -1 is refused;
- null for a field the schema does not make nullable is refused ("non-nullable field X
  was serialized as null"), as is a compact string over 0x7fff bytes;
- a nullable struct carries an int8 presence marker (KIP-893): kio reads -1 as null and
  anything else as present, Kafka any negative as null, so other negatives are refused;
- a known tagged field is checked as its type and must take exactly the size it declares
  (kio goes by what it read, not by the size); an unknown one is skipped, and removed from
  the frame handed to kio, which raises on it. A known tagged field that Kafka lets be
  null (Fetch ``cluster_id``) sent as null means its default, None, which kio cannot
  read (it reads tagged strings as non-nullable): it is removed too;
- at most ``MAX_ARRAY_ELEMENTS`` array items in one request.

Bytes after the body are allowed: Kafka's ``RequestContext.parseRequest`` /
``AbstractRequest.parseRequest`` parse the body from the buffer and never look at what is
left, and kio ignores them too.

UTF-8: kio's reader validates every string it reads (Rust ``from_utf8``) and refuses the
frame otherwise, so the walk does not do it twice (it would cost more than kio's whole
decode of a string-heavy request). ``check_request(..., check_utf8=True)`` does, and
``decode_request`` runs it when kio refuses a frame, to name the offending field.
Values inside fixed-size fields (a bool other than 0/1, a timestamp out of range) are
kio's to refuse the same way. What the guard promises is that kio is never asked to
allocate for a length the frame cannot back, that it never meets a tag it does not know,
and that what it returns has no None where the schema has no null.

Each entity class is compiled once (``functools.cache``) into a straight-line Python
function (source generated from the schema, visible in tracebacks); a frame costs one
call per struct on the wire, copies nothing, and only when a tagged field has to go is a
new frame built.
"""

from __future__ import annotations

import linecache
from dataclasses import fields
from functools import cache
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from shoal.protocol.guard_runtime import (
    HELPERS,
    MAX_ARRAY_ELEMENTS,
    MAX_STRING_LENGTH,
    MalformedRequest,
    State,
    Tagged,
    encode_uvarint,
)

__all__ = ["MAX_ARRAY_ELEMENTS", "MAX_STRING_LENGTH", "MalformedRequest", "check_request", "encode_uvarint"]

# Wire sizes of the fixed-size kafka_types kio knows.
FIXED_SIZES: dict[str, int] = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}

_BYTES_TYPES = frozenset({"bytes", "records"})
_LENGTH_PREFIXED = _BYTES_TYPES | {"string"}


# --------------------------------------------------------------------------- code generation


class _Plan:
    """How to check one entity: ``check(buf, pos, end, state) -> pos``, its smallest wire size,
    and its exact size when every field has a fixed size (and it has no tag section)."""

    __slots__ = ("check", "min_size", "fixed_size")

    def __init__(self, check: Any, min_size: int, fixed_size: int | None) -> None:
        self.check = check
        self.min_size = min_size
        self.fixed_size = fixed_size




class _Emitter:
    """Source lines of one generated function, and the objects its code refers to."""

    def __init__(self, utf8: bool) -> None:
        self.utf8 = utf8
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = dict(HELPERS)

    def line(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def ref(self, value: Any, prefix: str) -> str:
        name = f"{prefix}_{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def compile(self, name: str, label: str) -> Any:
        source = "\n".join(self.lines) + "\n"
        filename = f"<shoal.protocol.guard {label}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), self.namespace)  # source generated above from the schema
        return self.namespace[name]

    # ---- one value at ``pos``; each leaves ``pos`` after it or raises

    def fixed(self, ind: int, size: int, names: tuple[tuple[int, str], ...]) -> None:
        self.line(ind, f"pos += {size}")
        self.line(ind, "if pos > end:")
        self.line(ind + 1, f"raise _fixed_error({self.ref(names, 'names')}, {size}, pos - {size}, end)")

    def compact(self, ind: int, where: str, nullable: bool, text: bool, var: str = "n") -> None:
        """Compact string or bytes: uvarint length + 1, 0 for null."""
        w = repr(where)
        self.line(ind, "if pos >= end:")
        self.line(ind + 1, f"raise _truncated({w}, 1, 0)")
        self.line(ind, f"{var} = buf[pos]")
        self.line(ind, f"if {var} < 128:")
        self.line(ind + 1, "pos += 1")
        self.line(ind, "else:")
        self.line(ind + 1, f"{var}, pos = read_uvarint(buf, pos, end, {w})")
        self.line(ind, f"if {var}:")
        self.line(ind + 1, f"{var} -= 1")
        self.line(ind + 1, f"if {var} > end - pos:")
        self.line(ind + 2, f"raise _truncated({w}, {var}, end - pos)")
        if text:
            self.line(ind + 1, f"if {var} > {MAX_STRING_LENGTH}:")
            self.line(ind + 2, f"raise _too_long({w}, {var})")
            if self.utf8:
                self.line(ind + 1, f"_check_utf8(buf, pos, pos + {var}, {w})")
        self.line(ind + 1, f"pos += {var}")
        if not nullable:
            self.line(ind, "else:")
            self.line(ind + 1, f"raise _null({w})")

    def legacy_string(self, ind: int, where: str, nullable: bool, var: str = "n") -> None:
        """int16 length, -1 for null."""
        w = repr(where)
        self.line(ind, "if pos + 2 > end:")
        self.line(ind + 1, f"raise _truncated({w}, 2, end - pos)")
        self.line(ind, f"{var} = (buf[pos] << 8) | buf[pos + 1]")
        self.line(ind, "pos += 2")
        self.line(ind, f"if {var} < 32768:")
        self.line(ind + 1, f"if {var} > end - pos:")
        self.line(ind + 2, f"raise _truncated({w}, {var}, end - pos)")
        if self.utf8:
            self.line(ind + 1, f"_check_utf8(buf, pos, pos + {var}, {w})")
        self.line(ind + 1, f"pos += {var}")
        self.line(ind, f"elif {var} != 65535:")
        self.line(ind + 1, f"raise _negative({w}, {var} - 65536)")
        if not nullable:
            self.line(ind, "else:")
            self.line(ind + 1, f"raise _null({w})")

    def legacy_bytes(self, ind: int, where: str, nullable: bool, var: str = "n") -> None:
        """int32 length, -1 for null."""
        w = repr(where)
        self.line(ind, "if pos + 4 > end:")
        self.line(ind + 1, f"raise _truncated({w}, 4, end - pos)")
        self.line(ind, f"{var} = _unpack_i32(buf, pos)[0]")
        self.line(ind, "pos += 4")
        self.line(ind, f"if {var} >= 0:")
        self.line(ind + 1, f"if {var} > end - pos:")
        self.line(ind + 2, f"raise _truncated({w}, {var}, end - pos)")
        self.line(ind + 1, f"pos += {var}")
        self.line(ind, f"elif {var} != -1:")
        self.line(ind + 1, f"raise _negative({w}, {var})")
        if not nullable:
            self.line(ind, "else:")
            self.line(ind + 1, f"raise _null({w})")

    def primitive(self, ind: int, where: str, kafka_type: str, flexible: bool, nullable: bool, var: str = "n") -> None:
        if kafka_type == "string":
            if flexible:
                self.compact(ind, where, nullable, text=True, var=var)
            else:
                self.legacy_string(ind, where, nullable, var=var)
        elif kafka_type in _BYTES_TYPES:
            if flexible:
                self.compact(ind, where, nullable, text=False, var=var)
            else:
                self.legacy_bytes(ind, where, nullable, var=var)
        else:
            raise TypeError(f"{where}: no guard for kafka_type {kafka_type!r}")

    def struct(self, ind: int, where: str, plan: _Plan, nullable: bool) -> None:
        check = self.ref(plan.check, "entity")
        if not nullable:
            self.line(ind, f"pos = {check}(buf, pos, end, state)")
            return
        w = repr(where)
        self.line(ind, "if pos >= end:")
        self.line(ind + 1, f"raise _truncated({w}, 1, 0)")
        self.line(ind, "m = buf[pos]")
        self.line(ind, "pos += 1")
        self.line(ind, "if m < 128:")
        self.line(ind + 1, f"pos = {check}(buf, pos, end, state)")
        self.line(ind, "elif m != 255:")
        self.line(ind + 1, f"raise _bad_marker({w}, m)")

    def array(self, ind: int, where: str, flexible: bool, nullable: bool, item: tuple[Any, ...]) -> None:
        """``item``: ("fixed", size), ("entity", plan) or ("primitive", kafka_type)."""
        w = repr(where)
        if flexible:
            self.line(ind, "if pos >= end:")
            self.line(ind + 1, f"raise _truncated({w}, 1, 0)")
            self.line(ind, "n = buf[pos]")
            self.line(ind, "if n < 128:")
            self.line(ind + 1, "pos += 1")
            self.line(ind, "else:")
            self.line(ind + 1, f"n, pos = read_uvarint(buf, pos, end, {w})")
            self.line(ind, "if n:")
            self.line(ind + 1, "n -= 1")
        else:
            self.line(ind, "if pos + 4 > end:")
            self.line(ind + 1, f"raise _truncated({w}, 4, end - pos)")
            self.line(ind, "n = _unpack_i32(buf, pos)[0]")
            self.line(ind, "pos += 4")
            self.line(ind, "if n < 0:")
            self.line(ind + 1, "if n != -1:")
            self.line(ind + 2, f"raise _negative({repr(where + ' array')}, n)")
            if not nullable:
                self.line(ind + 1, f"raise _null({w})")
            self.line(ind, "else:")
        body = ind + 1
        kind = item[0]
        smallest = item[1] if kind == "fixed" else item[1].min_size if kind == "entity" else 1 if flexible else 2
        self.line(body, "if n:")
        self.line(body + 1, f"if n * {max(smallest, 1)} > end - pos:")
        self.line(body + 2, f"raise _too_many({w}, n, end - pos)")
        self.line(body + 1, f"_count_elements(state, n, {w})")
        if kind == "fixed":
            self.line(body + 1, f"pos += n * {item[1]}")
        elif kind == "entity":
            self.line(body + 1, "for _ in range(n):")
            self.line(body + 2, f"pos = {self.ref(item[1].check, 'entity')}(buf, pos, end, state)")
        else:
            self.line(body + 1, "for _ in range(n):")
            self.primitive(body + 2, f"{where}[]", item[1], flexible, nullable=False, var="ln")
        if flexible and not nullable:
            self.line(ind, "else:")
            self.line(ind + 1, f"raise _null({w})")


def _nullable_top(field: Any) -> bool:
    """Whether the field's type itself (not its items) admits None: ``X | None``."""
    return get_origin(field.type) in (UnionType, Union) and NoneType in get_args(field.type)


def _field_shape(cls: type, field: Any, tagged: bool, utf8: bool) -> tuple[Any, ...]:
    """How kio reads a field (as its ``build_field_schema`` does): one of
    ("fixed", size), ("header_client_id",), ("primitive", kafka_type, nullable),
    ("struct", plan, nullable), ("array", nullable, item)."""
    if cls.__name__ == "RequestHeader" and field.name == "client_id":
        # Always a nullable int16-length string, even in flexible header v2 (RequestHeader.json).
        return ("header_client_id",)
    kind = classify_field(field)
    if isinstance(kind, PrimitiveField):
        kafka_type = get_schema_field_type(field)
        if kafka_type in FIXED_SIZES:
            return ("fixed", FIXED_SIZES[kafka_type])
        # kio reads a tagged primitive as non-nullable: its absence is what stands for null.
        return ("primitive", kafka_type, is_optional(field) and not tagged)
    if isinstance(kind, EntityField):
        plan = _entity_plan(kind.type_, utf8)
        nullable = is_optional(field)
        if not nullable and plan.fixed_size is not None:
            return ("fixed", plan.fixed_size)
        return ("struct", plan, nullable)
    if isinstance(kind, PrimitiveTupleField):
        kafka_type = get_schema_field_type(field)
        item: tuple[Any, ...] = ("fixed", FIXED_SIZES[kafka_type]) if kafka_type in FIXED_SIZES else ("primitive", kafka_type)
    elif isinstance(kind, EntityTupleField):
        plan = _entity_plan(kind.type_, utf8)
        item = ("fixed", plan.fixed_size) if plan.fixed_size is not None else ("entity", plan)
    else:  # pragma: no cover - classify_field knows no other kind
        raise TypeError(f"{cls.__name__}.{field.name}: unknown field kind {kind!r}")
    # kio reads every array as nullable; the schema says which may be.
    return ("array", _nullable_top(field), item)


def _emit_field(em: _Emitter, ind: int, where: str, shape: tuple[Any, ...], flexible: bool) -> None:
    kind = shape[0]
    if kind == "fixed":
        em.fixed(ind, shape[1], ((0, where),))
    elif kind == "header_client_id":
        em.legacy_string(ind, where, nullable=True)
    elif kind == "primitive":
        em.primitive(ind, where, shape[1], flexible, shape[2])
    elif kind == "struct":
        em.struct(ind, where, shape[1], shape[2])
    else:
        em.array(ind, where, flexible, shape[1], shape[2])


def _min_size(shape: tuple[Any, ...], flexible: bool) -> int:
    kind = shape[0]
    if kind == "fixed":
        return shape[1]
    if kind == "struct":
        return 1 if shape[2] else shape[1].min_size
    if kind == "array":
        return 1 if flexible else 4
    if kind == "header_client_id":
        return 2
    return 1 if flexible else (2 if shape[1] == "string" else 4)


@cache
def _entity_plan(cls: type, utf8: bool = False) -> _Plan:
    flexible = bool(cls.__flexible__)
    name = cls.__name__
    label = f"{cls.__module__}.{name}{' utf8' if utf8 else ''}"
    em = _Emitter(utf8)
    em.line(0, "def check(buf, pos, end, state):")
    known: dict[int, Tagged] = {}
    min_size = 0
    all_fixed = True
    run: list[tuple[int, str]] = []
    run_size = 0

    def flush() -> None:
        nonlocal run_size
        if run_size:
            em.fixed(1, run_size, tuple(run))
            run.clear()
            run_size = 0

    for field in fields(cls):
        where = f"{name}.{field.name}"
        tag = get_field_tag(field)
        if tag is not None:
            shape = _field_shape(cls, field, tagged=True, utf8=utf8)
            sub = _Emitter(utf8)
            sub.line(0, "def check(buf, pos, end, state):")
            _emit_field(sub, 1, where, shape, flexible)
            sub.line(1, "return pos")
            null_is_default = (
                shape[0] == "primitive"
                and shape[1] in _LENGTH_PREFIXED
                and is_optional(field)
                and field.default is None
            )
            known[int(tag)] = Tagged(where, sub.compile("check", f"{label}.{field.name}"), null_is_default)
            continue
        shape = _field_shape(cls, field, tagged=False, utf8=utf8)
        min_size += _min_size(shape, flexible)
        if shape[0] == "fixed":  # consecutive fixed-size fields are checked as one run
            run.append((run_size, where))
            run_size += shape[1]
            continue
        all_fixed = False
        flush()
        _emit_field(em, 1, where, shape, flexible)
    flush()
    if flexible:
        min_size += 1
        em.line(1, "if pos >= end:")
        em.line(2, f"raise _truncated({name + ' tagged fields'!r}, 1, 0)")
        em.line(1, "if buf[pos]:")
        em.line(2, f"pos = _tagged_section(buf, pos, end, state, {name!r}, {em.ref(known, 'known')})")
        em.line(1, "else:")
        em.line(2, "pos += 1")
    em.line(1, "return pos")
    fixed_size = min_size if all_fixed and not flexible else None
    return _Plan(em.compile("check", label), min_size, fixed_size)


# --------------------------------------------------------------------------- entry point


def _rebuild(frame: Any, edits: list[tuple[int, int, bytes]]) -> bytes:
    edits.sort()
    out = bytearray()
    last = 0
    for start, end, replacement in edits:
        out += frame[last:start]
        out += replacement
        last = end
    out += frame[last:]
    return bytes(out)


def check_request(
    frame: bytes | memoryview, cls: type, header_cls: type, *, check_utf8: bool = False
) -> bytes | memoryview:
    """Check a request frame (header and body, without size prefix) against its schemas.

    Returns the frame to hand to kio: ``frame`` itself, or a copy without the tagged fields
    kio cannot read. Raises MalformedRequest, and nothing else, when the frame is refused.
    ``check_utf8`` also checks that strings are UTF-8 (kio does; see the module docstring).
    """
    buf = frame
    state = State()
    try:
        if isinstance(buf, memoryview) and (buf.format != "B" or buf.ndim != 1):
            buf = buf.cast("B")
        end = len(buf)
        pos = _entity_plan(header_cls, check_utf8).check(buf, 0, end, state)
        _entity_plan(cls, check_utf8).check(buf, pos, end, state)
        # Bytes after the body are left alone, as Kafka does (see the module docstring).
    except MalformedRequest:
        raise
    except Exception as exc:  # a bug here must not take the connection handler down with it
        raise MalformedRequest(f"guard internal error: {exc.__class__.__name__}: {exc}") from None
    if state.edits:
        return _rebuild(buf, state.edits)
    return frame
