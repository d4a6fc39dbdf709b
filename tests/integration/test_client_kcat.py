"""kcat 1.7.1 (Debian, librdkafka 2.0.2: an older, strict parser) round trip, one codec per test.

kcat reads "key:value" lines from stdin and lets librdkafka's partitioner place them, so the
checker matches records to the partition they came back from; headers (-H) are per run and the
client stamps CreateTime itself.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import time

import pytest

from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import create_diskless_topic
from tests.support.workload import Rec, Sent, check_records

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
CODECS = ["gzip", "snappy", "lz4", "zstd"]
RECORDS_PER_CODEC = 25_000
PARTITIONS = 4

pytestmark = pytest.mark.skipif(
    shutil.which("kcat") is None, reason="kcat not installed (apt-get install kcat)"
)


def kcat_workload(n: int, tag: str, codec: str, seed: int) -> tuple[bytes, list[Sent]]:
    """stdin for `kcat -P -K:` and the records it stands for."""
    rnd = random.Random(seed)
    headers = (("tag", tag.encode()), ("codec", codec.encode()))
    lines: list[bytes] = []
    sent: list[Sent] = []
    for i in range(n):
        key = f"key-{i % 5003}".encode()
        value = f"{tag}|{i:08d}|".encode() + rnd.randbytes(40).hex().encode()
        lines.append(key + b":" + value)
        sent.append(Sent(i, -1, key, value, headers, None))
    return b"\n".join(lines) + b"\n", sent


def kcat_consume_partition(bootstrap: str, topic: str, partition: int) -> list[Rec]:
    proc = subprocess.run(
        [KCAT, "-C", "-b", bootstrap, "-t", topic, "-p", str(partition), "-o", "beginning", "-e", "-J", "-q"],
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, (
        f"kcat consumer p{partition} exited {proc.returncode}: {proc.stderr[-2000:]!r}"
    )
    out: list[Rec] = []
    for line in proc.stdout.splitlines():
        if not line.strip():
            continue
        m = json.loads(line)
        ts_type = {"create": 0, "logappend": 1}.get(m.get("tstype"), -1)
        raw_headers = m.get("headers") or []
        if isinstance(raw_headers, dict):  # the documented envelope
            pairs = list(raw_headers.items())
        else:  # kcat 1.7.1 prints a flat [name, value, name, value, ...] list
            pairs = list(zip(raw_headers[::2], raw_headers[1::2], strict=True))
        headers = tuple((k, None if v is None else str(v).encode()) for k, v in pairs)
        key = None if m.get("key") is None else str(m["key"]).encode()
        value = None if m.get("payload") is None else str(m["payload"]).encode()
        out.append(Rec(m["partition"], m["offset"], key, value, headers, ts_type, m["ts"]))
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("codec", CODECS)
def test_kcat_round_trip(broker: BrokerProcess, topic_name: str, codec: str) -> None:
    """kcat -P (idempotent, compressed, keyed, with -H headers) then kcat -C per partition."""
    create_diskless_topic(broker.bootstrap, topic_name, partitions=PARTITIONS)
    stdin, sent = kcat_workload(RECORDS_PER_CODEC, f"kcat-{codec}", codec, seed=44)

    t0 = int(time.time() * 1000)
    produce = subprocess.run(
        [
            KCAT,
            "-P",
            "-b",
            broker.bootstrap,
            "-t",
            topic_name,
            "-K:",
            "-z",
            codec,
            "-H",
            f"tag=kcat-{codec}",
            "-H",
            f"codec={codec}",
            "-X",
            "enable.idempotence=true",
            "-X",
            "linger.ms=5",
        ],
        input=stdin,
        capture_output=True,
        timeout=180,
    )
    t1 = int(time.time() * 1000)
    assert produce.returncode == 0, f"kcat -P exited {produce.returncode}: {produce.stderr[-3000:]!r}"
    assert b"fail" not in produce.stderr.lower(), f"kcat -P reported failures: {produce.stderr[-3000:]!r}"

    received: list[Rec] = []
    for p in range(PARTITIONS):
        received += kcat_consume_partition(broker.bootstrap, topic_name, p)
    assert {r.partition for r in received} <= set(range(PARTITIONS))
    # CreateTime stamped by librdkafka during the run (generous margin for clock reads).
    check_records(received, sent, timestamp_range=(t0 - 60_000, t1 + 60_000))
