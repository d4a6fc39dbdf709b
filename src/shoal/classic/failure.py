"""The log-dir failure channel (KIP-112): every I/O error of a log dir ends up here.

Kafka's rule: any IOException while touching a log dir puts the whole dir offline until the
operator fixes it; its replicas stop and answer KAFKA_STORAGE_ERROR, the rest of the broker
keeps serving. Engine code wraps its file operations in ``guard(dir, what)``: an ``OSError``
inside marks the dir offline (once; listeners hear about it) and is re-raised as
``KafkaError(KAFKA_STORAGE_ERROR)``, so callers never see an OSError. An operation on a dir
that is already offline fails the same way without touching the disk.

Listeners run synchronously in the thread that hit the error, after the engine released its
per-log locks (guards sit outside every lock), so a listener may close logs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from shoal.protocol.errors import ErrorCode, KafkaError

__all__ = ["LogDirFailureChannel", "storage_error"]

_log = logging.getLogger(__name__)

OfflineListener = Callable[[str, str], None]


def storage_error(message: str) -> KafkaError:
    """KAFKA_STORAGE_ERROR with a message (retriable: the client retries, maybe on a new leader)."""
    return KafkaError(ErrorCode.kafka_storage_error, message)


class LogDirFailureChannel:
    """Which log dirs are offline, and who to tell when one goes offline."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offline: dict[str, str] = {}
        self._listeners: list[OfflineListener] = []

    def add_listener(self, listener: OfflineListener) -> None:
        """``listener(log_dir, message)`` is called once per dir when it goes offline."""
        with self._lock:
            self._listeners.append(listener)

    def maybe_add_offline_dir(self, log_dir: str, message: str, error: BaseException | None = None) -> None:
        """Mark ``log_dir`` offline; the first time, log it and notify the listeners."""
        with self._lock:
            if log_dir in self._offline:
                return
            self._offline[log_dir] = message
            listeners = list(self._listeners)
        _log.error("Log dir %s is offline: %s", log_dir, message, exc_info=error)
        for listener in listeners:
            try:
                listener(log_dir, message)
            except Exception:  # a listener bug must not hide the storage error from the caller
                _log.exception("Log dir failure listener failed for %s", log_dir)

    def is_offline(self, log_dir: str) -> bool:
        return log_dir in self._offline

    def offline_dirs(self) -> dict[str, str]:
        """Offline dir -> the message that put it offline."""
        with self._lock:
            return dict(self._offline)

    def clear(self, log_dir: str) -> None:
        """Forget a failure: only for ``LogManager.reset_dir`` after the operator fixed the disk."""
        with self._lock:
            self._offline.pop(log_dir, None)

    @contextmanager
    def guard(self, log_dir: str, what: str) -> Iterator[None]:
        """Run a block of file operations on ``log_dir``; OSError -> offline dir + KAFKA_STORAGE_ERROR."""
        if log_dir in self._offline:
            raise storage_error(f"Log dir {log_dir} is offline")
        try:
            yield
        except OSError as e:
            message = f"Error while {what} in dir {log_dir}: {e}"
            self.maybe_add_offline_dir(log_dir, message, e)
            raise storage_error(message) from e
