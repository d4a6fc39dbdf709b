"""ApiVersions (18): the APIs and versions this broker implements, and nothing else."""

from __future__ import annotations

import datetime
import io
import re
import struct
from typing import Any

from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
from kio.serial import entity_writer

from shoal.protocol.apis import SUPPORTED_APIS, RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode
from shoal.server.context import ServerContext

_ZERO = datetime.timedelta(0)


# Kafka's ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN (KIP-511); it admits no empty string.
_SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def is_valid_request(header: RequestHeader, request: Any) -> bool:
    """Kafka's ApiVersionsRequest.isValid(): from v3 the client software name and version must match."""
    if header.api_version < 3:
        return True
    return all(
        isinstance(value, str) and _SOFTWARE_NAME_VERSION.fullmatch(value) is not None
        for value in (request.client_software_name, request.client_software_version)
    )


async def handle_api_versions(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    if not is_valid_request(header, request):
        # As Kafka's ApiVersionsRequest.getErrorResponse(INVALID_REQUEST): only UNSUPPORTED_VERSION
        # answers carry api_keys, this one has none.
        return make(cls, error_code=ErrorCode.invalid_request, api_keys=(), throttle_time=_ZERO)
    version_cls = nested(cls, "ApiVersion")
    return make(
        cls,
        error_code=ErrorCode.none,
        api_keys=_api_keys(version_cls),
        throttle_time=_ZERO,
    )


def _api_keys(version_cls: type) -> tuple[Any, ...]:
    return tuple(
        version_cls(api_key=spec.key, min_version=spec.advertised_min_version, max_version=spec.max_version)
        for spec in SUPPORTED_APIS.values()
    )


def unsupported_version_response(header: RequestHeader) -> bytes:
    """The v0-format answer to an ApiVersions request of a version we do not know.

    The client learns our range from it and retries with a version we support.
    """
    buffer = io.BytesIO()
    buffer.write(struct.pack(">ii", 0, header.correlation_id))
    entity_writer(ApiVersionsResponse)(
        buffer, ApiVersionsResponse(error_code=ErrorCode.unsupported_version, api_keys=_api_keys(ApiVersion))
    )
    data = buffer.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)
