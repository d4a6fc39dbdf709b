"""How ``shoal consume`` prints a record: Kafka's formatter, a kcat-style template, or JSON.

- **Kafka's DefaultMessageFormatter** (the default): the value, with ``--property
  print.key=true`` (``print.timestamp``, ``print.partition``, ``print.offset``,
  ``print.headers``, ``print.value``, ``key.separator``, ``line.separator``,
  ``headers.separator``, ``null.literal``) as kafka-console-consumer prints them.
- **A template** (``--format``), kcat's ``-f`` tokens: ``%t`` topic, ``%p`` partition, ``%o``
  offset, ``%k`` key, ``%s`` value, ``%K``/``%S`` key/value length (-1 for null), ``%T``
  timestamp (ms), ``%h`` headers as ``k=v,k2=v2``, ``%%``; escapes ``\\n \\t \\r \\\\``.
- **JSON** (``--format json``): one object per line; keys, values and header values are JSON
  strings when they are UTF-8 and ``{"base64": "..."}`` otherwise, so no byte is lost.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any

from shoal.cli.kafka_client.consumer import ConsumedRecord

Formatter = Callable[[ConsumedRecord], bytes]

TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}
FORMATTER_PROPERTIES = frozenset(
    {"print.timestamp", "print.key", "print.offset", "print.partition", "print.headers", "print.value",
     "key.separator", "line.separator", "headers.separator", "null.literal"}
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


class FormatError(ValueError):
    """A template or formatter property the tool cannot use; the message says which."""


def _flag(props: Mapping[str, str], name: str, default: bool) -> bool:
    raw = props.get(name)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise FormatError(f"Invalid value {raw} for {name}: expected true or false")
    return text == "true"


def kafka_formatter(props: Mapping[str, str]) -> Formatter:
    """Kafka's DefaultMessageFormatter, configured by the ``--property`` values."""
    unknown = sorted(set(props) - FORMATTER_PROPERTIES)
    if unknown:
        raise FormatError(f"Unknown formatter properties: {', '.join(unknown)}")
    show = {
        name: _flag(props, f"print.{name}", name == "value")
        for name in ("timestamp", "partition", "offset", "headers", "key", "value")
    }
    key_sep = props.get("key.separator", "\t").encode()
    line_sep = props.get("line.separator", "\n").encode()
    headers_sep = props.get("headers.separator", ",").encode()
    null = props.get("null.literal", "null").encode()

    def fmt(r: ConsumedRecord) -> bytes:
        columns: list[bytes] = []
        if show["timestamp"]:
            columns.append(f"{TIMESTAMP_TYPES.get(r.timestamp_type, 'CreateTime')}:{r.timestamp}".encode())
        if show["partition"]:
            columns.append(f"Partition:{r.partition}".encode())
        if show["offset"]:
            columns.append(f"Offset:{r.offset}".encode())
        if show["headers"]:
            columns.append(
                headers_sep.join(k.encode() + b":" + (null if v is None else v) for k, v in r.headers)
                if r.headers
                else b"NO_HEADERS"
            )
        if show["key"]:
            columns.append(null if r.key is None else r.key)
        if show["value"]:
            columns.append(null if r.value is None else r.value)
        return key_sep.join(columns) + line_sep

    return fmt


def template_formatter(template: str) -> Formatter:
    """A kcat ``-f`` style template, parsed once into pieces."""
    pieces: list[Callable[[ConsumedRecord], bytes]] = []
    literal: list[str] = []

    def flush_literal() -> None:
        if literal:
            text = "".join(literal).encode()
            pieces.append(lambda r, text=text: text)
            literal.clear()

    tokens: dict[str, Callable[[ConsumedRecord], bytes]] = {
        "t": lambda r: r.topic.encode(),
        "p": lambda r: str(r.partition).encode(),
        "o": lambda r: str(r.offset).encode(),
        "k": lambda r: r.key or b"",
        "s": lambda r: r.value or b"",
        "K": lambda r: str(-1 if r.key is None else len(r.key)).encode(),
        "S": lambda r: str(-1 if r.value is None else len(r.value)).encode(),
        "T": lambda r: str(r.timestamp).encode(),
        "h": lambda r: b",".join(k.encode() + b"=" + (v or b"") for k, v in r.headers),
    }
    i = 0
    while i < len(template):
        ch = template[i]
        nxt = template[i + 1] if i + 1 < len(template) else ""
        if ch == "%":
            if nxt == "%":
                literal.append("%")
            elif nxt in tokens:
                flush_literal()
                pieces.append(tokens[nxt])
            else:
                raise FormatError(f"Unsupported formatter token %{nxt} in --format (known: %t %p %o %k %s %K %S %T %h %%)")
            i += 2
        elif ch == "\\" and nxt in _ESCAPES:
            literal.append(_ESCAPES[nxt])
            i += 2
        else:
            literal.append(ch)
            i += 1
    flush_literal()
    return lambda r: b"".join(piece(r) for piece in pieces)


def _json_bytes(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def json_formatter(record: ConsumedRecord) -> bytes:
    """One JSON object per record, one per line."""
    doc = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestampType": TIMESTAMP_TYPES.get(record.timestamp_type, "CreateTime"),
        "key": _json_bytes(record.key),
        "value": _json_bytes(record.value),
        "headers": [{"key": k, "value": _json_bytes(v)} for k, v in record.headers],
    }
    return json.dumps(doc, ensure_ascii=False).encode("utf-8") + b"\n"


def formatter_for(template: str | None, props: Mapping[str, str]) -> Formatter:
    """The formatter the options ask for: ``--format json``, a ``--format`` template, or Kafka's."""
    if template is None:
        return kafka_formatter(props)
    if props:
        raise FormatError("--property formatter settings apply to Kafka's formatter; they cannot be used with --format")
    if template == "json":
        return json_formatter
    return template_formatter(template)
