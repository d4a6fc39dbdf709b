"""Build an ObjectStorage from one URL, so a broker config needs a single string.

Accepted forms:

- ``/abs/path``, ``rel/path`` or ``file:///abs/path`` -> ``LocalObjectStorage``
- ``memory://`` -> ``MemoryObjectStorage`` (a fresh, empty store per call)
- ``s3://bucket[/prefix][?query]`` -> ``S3ObjectStorage``; query parameters, all
  optional: ``endpoint``, ``region`` (default ``us-east-1``), ``allow_http``
  (default true when the endpoint is ``http://``), ``access_key_id``,
  ``secret_access_key``, ``session_token`` (default: the AWS environment
  variables / credential chain), and the failure bounds ``connect_timeout``,
  ``request_timeout``, ``retry_timeout`` (seconds) and ``max_retries``.
- ``faulty+<url>[?control=/path/ctl.json][&seed=N]`` -> ``FaultyObjectStorage`` around
  the backend of ``<url>`` (any form above written with a scheme), for failure tests;
  ``control`` names the JSON fault control file, ``seed`` the seed used until that
  file sets one. Other query parameters belong to the inner URL.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, parse_qsl, unquote, urlencode, urlsplit

from shoal.objects.faulty import FaultyObjectStorage
from shoal.objects.local import LocalObjectStorage
from shoal.objects.memory import MemoryObjectStorage
from shoal.objects.s3 import S3ObjectStorage
from shoal.objects.storage import ObjectStorage

__all__ = ["open_object_storage", "redact_storage_url"]

_S3_PARAMS = frozenset(
    {
        "endpoint",
        "region",
        "allow_http",
        "access_key_id",
        "secret_access_key",
        "session_token",
        "connect_timeout",
        "request_timeout",
        "retry_timeout",
        "max_retries",
    }
)
#: Query parameters never printed (logs, error messages).
_SECRETS = frozenset({"secret_access_key", "session_token"})
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def redact_storage_url(url: str) -> str:
    """The URL with its secret query parameters replaced by ``***``, for logs."""
    parts = urlsplit(url)
    if not parts.query:
        return url
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if not any(k in _SECRETS for k, _ in pairs):
        return url
    return parts._replace(query=urlencode([(k, "***" if k in _SECRETS else v) for k, v in pairs], safe="*/:")).geturl()


def _parse_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"object storage URL parameter {name}={value!r} is not a boolean")


def _parse_number(name: str, value: str, kind: type[int] | type[float]) -> float:
    try:
        number = kind(value)
    except ValueError:
        raise ValueError(f"object storage URL parameter {name}={value!r} is not a {kind.__name__}") from None
    if number < 0:
        raise ValueError(f"object storage URL parameter {name}={value!r} must not be negative")
    return number


def _open_s3(url: str) -> S3ObjectStorage:
    parts = urlsplit(url)
    bucket = parts.netloc
    if not bucket:
        raise ValueError(f"S3 object storage URL needs a bucket: {url!r} (expected s3://bucket/prefix)")
    params: dict[str, str] = {}
    for name, values in parse_qs(parts.query, keep_blank_values=True, strict_parsing=False).items():
        if name not in _S3_PARAMS:
            raise ValueError(
                f"unknown S3 object storage URL parameter {name!r}; known: {', '.join(sorted(_S3_PARAMS))}"
            )
        if len(values) != 1:
            raise ValueError(f"S3 object storage URL parameter {name!r} is given more than once")
        params[name] = values[0]
    endpoint = params.get("endpoint") or None
    return S3ObjectStorage(
        bucket,
        prefix=unquote(parts.path).strip("/"),
        endpoint=endpoint,
        region=params.get("region") or "us-east-1",
        access_key_id=params.get("access_key_id"),
        secret_access_key=params.get("secret_access_key"),
        session_token=params.get("session_token"),
        allow_http=_parse_bool("allow_http", params["allow_http"]) if "allow_http" in params else None,
        connect_timeout=_parse_number("connect_timeout", params.get("connect_timeout", "5"), float),
        request_timeout=_parse_number("request_timeout", params.get("request_timeout", "10"), float),
        retry_timeout=_parse_number("retry_timeout", params.get("retry_timeout", "10"), float),
        max_retries=int(_parse_number("max_retries", params.get("max_retries", "3"), int)),
    )


_FAULTY_PREFIX = "faulty+"
_FAULTY_PARAMS = frozenset({"control", "seed"})


def _open_faulty(url: str) -> FaultyObjectStorage:
    parts = urlsplit(url)
    inner_scheme = parts.scheme[len(_FAULTY_PREFIX) :]
    if not inner_scheme or inner_scheme.startswith(_FAULTY_PREFIX):
        raise ValueError(f"faulty object storage URL needs one inner scheme, e.g. faulty+file:///dir: {url!r}")
    ours: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in _FAULTY_PARAMS:
            if name in ours:
                raise ValueError(f"faulty object storage URL parameter {name!r} is given more than once")
            ours[name] = value
        else:
            rest.append((name, value))
    seed = int(_parse_number("seed", ours.get("seed", "0"), int))
    # Built by hand: urlunsplit drops the "//" of an empty authority ("memory://" -> "memory:").
    inner_url = f"{inner_scheme}://{parts.netloc}{parts.path}" + (f"?{urlencode(rest)}" if rest else "")
    return FaultyObjectStorage(open_object_storage(inner_url), seed=seed, control_file=ours.get("control") or None)


def open_object_storage(url: str) -> ObjectStorage:
    """The backend named by ``url``; ``ValueError`` for anything not understood."""
    if not url:
        raise ValueError("object storage URL is empty")
    scheme = urlsplit(url).scheme.lower() if "://" in url else ""
    if scheme == "":
        return LocalObjectStorage(Path(url))
    if scheme == "file":
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"file URL must be file:///absolute/path, got {url!r}")
        if not parts.path:
            raise ValueError(f"file URL has no path: {url!r}")
        return LocalObjectStorage(Path(unquote(parts.path)))
    if scheme == "memory":
        return MemoryObjectStorage()
    if scheme == "s3":
        return _open_s3(url)
    if scheme.startswith(_FAULTY_PREFIX):
        return _open_faulty(url)
    raise ValueError(
        f"unsupported object storage URL scheme {scheme!r} in {url!r}; "
        "use a filesystem path, file:///path, memory://, s3://bucket/prefix or faulty+<one of those URLs>"
    )
