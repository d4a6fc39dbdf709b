"""Kafka error codes (kio's enum) and the exception that carries one through our code."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "RecordValidationError"]


class KafkaError(Exception):
    """An error that maps to one Kafka error code, with a message for the client and the log."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message or code.name

    @property
    def retriable(self) -> bool:
        return bool(self.code.retriable)


class RecordValidationError(KafkaError):
    """A produce refused because of particular records (Kafka's RecordValidationException):
    Produce v8+ answers name them as ``record_errors`` (index in the batch, message)."""

    def __init__(self, code: ErrorCode, record_index: int, message: str) -> None:
        super().__init__(code, message)
        self.record_errors = ((record_index, message),)
