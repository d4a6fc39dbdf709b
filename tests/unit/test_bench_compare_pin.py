"""bench/compare.py --pin (bench/compare_runs.py): CPU lists parsed as taskset does, brokers' threads and runs pinned."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.bench_scripts import load_bench_script


def test_cpu_lists_and_bad_pins() -> None:
    compare = load_bench_script("compare_runs")
    assert compare.parse_cpus("0", "--pin") == {0}
    assert compare.parse_cpus("0,2-3", "--pin") == {0, 2, 3}
    pin = compare.Pinning.parse("0:1", [10, 11])
    assert (pin.brokers, pin.clients, pin.broker_pids) == ({0}, {1}, (10, 11))
    for bad in ("0", "a:1", "0:", "0:1-x"):
        with pytest.raises(SystemExit):
            compare.Pinning.parse(bad, [10, 11])
    for pids in ([], [10]):  # both brokers' pids are needed
        with pytest.raises(SystemExit):
            compare.Pinning.parse("0:1", pids)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_broker_and_its_threads_and_a_run_are_pinned() -> None:
    compare = load_bench_script("compare_runs")
    first, second = sorted(os.sched_getaffinity(0))[:2]
    # A stand-in broker with a second thread; a thread it starts after the pinning inherits it.
    code = (
        "import threading, time, os\n"
        "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "time.sleep(0.6)\n"
        "threading.Thread(target=lambda: print(sorted(os.sched_getaffinity(0)), flush=True)).start()\n"
        "time.sleep(30)\n"
    )
    broker = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.3)
        pin = compare.Pinning(frozenset({first}), frozenset({second}), (broker.pid,))
        pin.pin_brokers()
        tasks = list(Path(f"/proc/{broker.pid}/task").iterdir())
        assert len(tasks) >= 2 and all(os.sched_getaffinity(int(t.name)) == {first} for t in tasks)
        assert broker.stdout is not None and broker.stdout.readline().strip() == str([first])
        run = compare.run_child(
            [sys.executable, "-c", "import os, json; print(json.dumps(sorted(os.sched_getaffinity(0))))"],
            "[test]",
            30,
            0,
            pin,
        )
        assert run["report"] == [second]
    finally:
        broker.kill()
        broker.wait()
