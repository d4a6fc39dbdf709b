"""Record-level types that every topic kind shares (classic, diskless, tiered).

They live here, under ``records``, so that no storage kind depends on another one (or on the
Batch Coordinator) for the meaning of a record batch's attributes.
"""

from __future__ import annotations

from enum import IntEnum


class TimestampType(IntEnum):
    """Kafka's record timestamp types (batch attribute bit 3, ``TIMESTAMP_TYPE_FLAG``)."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @classmethod
    def from_config(cls, value: str) -> TimestampType:
        """The type a topic's ``message.timestamp.type`` (``CreateTime`` / ``LogAppendTime``) names."""
        return cls.LOG_APPEND_TIME if value == "LogAppendTime" else cls.CREATE_TIME
