"""The process entry point of ``shoal`` and ``python -m shoal``.

kio probes for ``hypothesis`` at import and, when that test library is installed, registers
strategies for its types: about 2 s of start-up and a ``.hypothesis/`` directory written into
the working directory of every broker. A Shoal process never uses it, so the probe is answered
"not installed" before anything imports kio. This lives here, not in ``shoal/__init__``, so test
processes that do use hypothesis can still import Shoal's modules.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Run the ``shoal`` command."""
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    from shoal.cli.main import main as cli_main

    cli_main()
