"""Build kio response objects without caring which fields a given version has.

kio generates one dataclass per API version with only that version's fields;
handlers describe a response once with every field they know, and ``make``
keeps those the version has.
"""

from __future__ import annotations

import sys
from functools import cache
from typing import Any


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(name for name in cls.__dataclass_fields__ if not name.startswith("__"))


def make(cls: type, **values: Any) -> Any:
    """Instantiate ``cls`` with the given values, dropping fields this version lacks."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def has_field(cls: type, name: str) -> bool:
    return name in _field_names(cls)


@cache
def nested(cls: type, name: str) -> Any:
    """A nested entity class (e.g. ``MetadataResponseTopic``) of the same API version as ``cls``,
    or None when that version has no such entity."""
    return getattr(sys.modules[cls.__module__], name, None)
