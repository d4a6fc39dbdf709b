"""What the client raises, with Kafka's own names and messages for broker error codes."""

from __future__ import annotations

import ast
import inspect
from functools import cache

from kio.schema import errors as kio_errors

from shoal.protocol.errors import ErrorCode


@cache
def _error_docs() -> dict[str, str]:
    """Kafka's message for each error code, read from the docstrings kio generated from Errors.java."""
    try:
        tree = ast.parse(inspect.getsource(kio_errors))
    except (OSError, TypeError, SyntaxError):
        return {}
    docs: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ErrorCode":
            body = node.body
            for stmt, following in zip(body, body[1:], strict=False):
                if (
                    isinstance(stmt, ast.Assign)
                    and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)
                    and isinstance(following, ast.Expr)
                    and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)
                ):
                    docs[stmt.targets[0].id] = " ".join(following.value.value.split())
    return docs


def error_message(code: ErrorCode) -> str:
    """Kafka's human message for an error code (e.g. NON_EMPTY_GROUP: 'The group is not empty.')."""
    return _error_docs().get(code.name, code.name.upper())


def error_name(code: ErrorCode) -> str:
    """Kafka's constant name for an error code, e.g. ``NON_EMPTY_GROUP``."""
    return code.name.upper()


class KafkaClientError(Exception):
    """The operation failed (connection, negotiation, protocol or a broker error); tools print it."""


class BrokerConnectionError(KafkaClientError):
    """The TCP connection failed or broke; the request may be retried on a fresh connection."""


class KafkaApiError(KafkaClientError):
    """A broker answered with an error code that the caller should see."""

    def __init__(self, code: ErrorCode, message: str | None = None, context: str = "") -> None:
        self.code = code
        self.message = message or error_message(code)
        prefix = f"{context}: " if context else ""
        super().__init__(f"{prefix}{error_name(code)}: {self.message}")


class UnsupportedApiError(KafkaClientError):
    """The broker does not serve an API (or no version the tool speaks)."""


class RetriableAnswer(Exception):
    """A retriable answer from a coordinator or leader; carries the code for the final error.

    Deliberately not a KafkaClientError: it never leaves the client, which retries it until the
    operation's deadline and then raises a KafkaClientError naming the last code.
    """

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(error_name(code))
        self.code = code
        self.message = message
