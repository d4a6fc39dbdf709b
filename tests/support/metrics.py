"""Reading a broker's Prometheus ``/metrics`` page in tests, with prometheus-client's own parser."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = list[tuple[str, dict[str, str], float]]


def scrape(port: int) -> Samples:
    """Every sample of the /metrics page on loopback ``port``: (name, labels, value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples]


def metric(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``labels``."""
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in labels.items()))
