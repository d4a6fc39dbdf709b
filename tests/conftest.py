"""Make `tests.support` importable however pytest is invoked (the repo root is not always on sys.path)."""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
