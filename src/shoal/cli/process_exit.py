"""Ending a process that used obstore without the interpreter's own shutdown.

obstore (Rust, PyO3) runs its I/O on background threads. When CPython (before 3.14) finalizes
while such a thread is still handing a result back to Python, the process aborts (SIGABRT in the
native extension, after everything was done: pyo3 PR #4874, rust-lang/rust#135929): about one run
in five of a tool that read or wrote S3 right before exiting. Commands that touch object storage
therefore end here once their work is done and their output flushed: logging is shut down (its
handlers flush), stdout and stderr are flushed, and the process exits with ``code`` at once.
``atexit`` handlers do not run, so this is only for commands that own no such cleanup.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

__all__ = ["exit_without_finalizing"]


def exit_without_finalizing(code: int) -> NoReturn:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more can be said
            stream.flush()
    os._exit(code)
