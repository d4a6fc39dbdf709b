"""ApiVersions (18): the APIs and versions this broker implements, and nothing else."""

from __future__ import annotations

import datetime
import io
import struct
from typing import Any

from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
from kio.serial import entity_writer

from shoal.protocol.apis import SUPPORTED_APIS, RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode
from shoal.server.context import ServerContext

_ZERO = datetime.timedelta(0)


async def handle_api_versions(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
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
