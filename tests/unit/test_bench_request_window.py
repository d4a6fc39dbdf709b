"""bench/bench_clients.py's request figures from librdkafka statistics (Little's law check)."""

from __future__ import annotations

from tests.support.bench_scripts import load_bench_script


def stats(rtt_sum_us: int, rtt_cnt: int, waiting: int, records: int) -> dict:
    """A librdkafka statistics document: the bootstrap pseudo-broker (nodeid -1) and one broker."""
    return {
        "brokers": {
            "127.0.0.1:9092/bootstrap": {"nodeid": -1, "rtt": {"sum": 999_999, "cnt": 9}, "waitresp_cnt": 9},
            "127.0.0.1:9092/1": {
                "nodeid": 1,
                "rtt": {"sum": rtt_sum_us, "cnt": rtt_cnt},
                "waitresp_cnt": waiting,
                "waitresp_msg_cnt": records,
            },
        }
    }


def test_round_trips_and_requests_in_flight_are_averaged_over_windows_and_summed_over_producers() -> None:
    bench = load_bench_script("bench_clients")
    first, second = bench.RequestWindow(), bench.RequestWindow()
    first.add(stats(rtt_sum_us=40_000, rtt_cnt=4, waiting=4, records=4_000))  # 10 ms each
    first.add(stats(rtt_sum_us=60_000, rtt_cnt=2, waiting=2, records=2_000))  # 30 ms each
    second.add(stats(rtt_sum_us=0, rtt_cnt=0, waiting=3, records=1_000))
    second.add({"brokers": {}})  # no broker yet: not a sample
    figures = bench.request_window_figures([first.totals(), second.totals()], record_size=1_000)
    assert figures["request_rtt_ms"] == 16.67  # 100 ms over 6 round trips
    # Per-producer means (3 and 3 requests; 3,000 and 1,000 records) summed: what waited at once.
    assert figures["requests_in_flight"] == 6.0
    assert figures["mb_in_flight"] == 4.0


def test_no_statistics_gives_no_figures() -> None:
    bench = load_bench_script("bench_clients")
    figures = bench.request_window_figures([bench.RequestWindow().totals()], record_size=1_000)
    assert figures == {"request_rtt_ms": None, "requests_in_flight": None, "mb_in_flight": None}


def test_producers_without_statistics_give_no_figures() -> None:
    """kafka-python producers (``--producer-client kafka-python``) report no request window."""
    bench = load_bench_script("bench_clients")
    figures = bench.request_window_figures([], record_size=1_000)
    assert figures == {"request_rtt_ms": None, "requests_in_flight": None, "mb_in_flight": None}
