"""The runtime's progress log and Prometheus endpoint: its series against
the log, and a scraper.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from urllib.request import urlopen

from prometheus_client.parser import text_string_to_metric_families


def progress_records(project: Path, output_root: str = "data") -> list[dict]:
    """The runtime's progress log of an environment: one record per batch."""
    log = project / output_root / "streams/progress.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def assert_metrics_match_progress_log(
    project: Path,
    output_root: str,
    since: float,
    port: int,
    trigger_interval: float = 1.0,
) -> set[str]:
    """Scrapes a running `kedro run`'s Prometheus endpoint: every series of
    every query equals the progress log's records of this run (those after
    ``since``, a Unix time), the first as many as the endpoint counted (the
    log is written just before the series, and may have gone on since).

    Returns:
        The queries the endpoint serves.
    """
    text = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    series = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }

    records = [
        r
        for r in progress_records(project, output_root)
        if unix_time(r["time"]) >= since
    ]
    queries = {
        dict(labels)["query"]
        for name, labels in series
        if name == "kedro_stream_batches_total"
    }
    for query in queries:
        served = {
            (name.removeprefix("kedro_stream_"), labels - {("query", query)}): value
            for (name, labels), value in series.items()
            if ("query", query) in labels and not name.endswith("_created")
        }
        batches = int(served.pop(("batches_total", frozenset())))
        logged = [r for r in records if r["query"] == query]
        assert len(logged) >= batches, (query, batches, len(logged))
        logged = logged[:batches]
        want = {
            (f"{figure}_total", frozenset()): sum(r[key] for r in logged)
            for figure, key in (
                ("input_rows", "input_rows"),
                ("written_rows", "rows_written"),
                ("quarantined_rows", "quarantined"),
                ("late_state_rows_dropped", "late_state_rows_dropped"),
            )
        }
        caught = Counter()
        for record in logged:
            caught.update(record["expectations"])
        want.update(
            (("expectation_records_total", frozenset({("rule", rule)})), count)
            for rule, count in caught.items()
        )
        want[("batch_duration_seconds_count", frozenset())] = batches
        want.update(last_batch_series(logged[-1]) if logged else {})
        for state in ("running", "stopped", "failed"):
            labels = frozenset({("kedro_stream_query_status", state)})
            want[("query_status", labels)] = float(state == "running")
        duration = served.pop(("batch_duration_seconds_sum", frozenset()))
        # Summed batch by batch, in the log's order, as the histogram sums them.
        assert duration == sum(r["duration_ms"] / 1000 for r in logged)
        want[("trigger_interval_seconds", frozenset())] = trigger_interval
        if logged:  # the times since then, at the scrape: figures of the moment
            assert served.pop(("seconds_since_last_batch", frozenset())) >= 0
            assert served.pop(("seconds_without_progress", frozenset())) >= 0
        # Spark's status at the scrape, a figure of the moment too: 1 or 0.
        for flag in ("trigger_active", "new_data_available"):
            assert served.pop((flag, frozenset())) in (0.0, 1.0)
        # The histogram's buckets are the durations' distribution: checked by
        # their count and sum above.
        served = {
            k: v for k, v in served.items() if k[0] != "batch_duration_seconds_bucket"
        }
        assert served == want, query
    return queries


def unix_time(iso: str) -> float:
    """Spark's ISO-8601 UTC time as a Unix time."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def last_batch_series(last: dict) -> dict:
    """The gauges a query's last progress-log record sets, as
    ``{(series, labels): value}``."""

    want = {
        ("last_batch_timestamp_seconds", frozenset()): unix_time(last["time"])
        + last["duration_ms"] / 1000
    }
    if last["state_rows"] is not None:
        want[("state_rows", frozenset())] = last["state_rows"]
    for operator in last.get("state_operators", []):
        labels = frozenset({("operator", operator["name"])})
        want[("state_operator_rows", labels)] = operator["rows"]
        want[("state_operator_memory_bytes", labels)] = operator["memory_bytes"]
    if last["watermark"]:
        want[("watermark_timestamp_seconds", frozenset())] = unix_time(
            last["watermark"]
        )
    for source in last["sources"]:
        for topic, partitions in (source["kafka_lag"] or {}).items():
            for partition, lag in partitions.items():
                labels = frozenset({("topic", topic), ("partition", partition)})
                want[("kafka_lag_messages", labels)] = lag
    return want


class Scraper:
    """Scrapes a Prometheus endpoint every ``interval`` seconds from a thread of
    its own, as Prometheus does, and keeps every scrape that answered.

    ``scrapes`` holds ``(unix time, {labels: value})``, the labels a frozenset
    of ``(name, value)`` pairs with ``__name__``.
    """

    def __init__(self, port: int, interval: float = 1.0) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.interval = interval
        self.scrapes: list[tuple[float, dict[frozenset, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        next_scrape = time.monotonic()
        while not self._stop.is_set():
            with contextlib.suppress(OSError):  # not serving yet, or any more
                at = time.time()
                text = urlopen(self.url, timeout=5).read().decode()
                values = {
                    frozenset({("__name__", sample.name), *sample.labels.items()}): (
                        sample.value
                    )
                    for family in text_string_to_metric_families(text)
                    for sample in family.samples
                }
                self.scrapes.append((at, values))
            next_scrape += self.interval
            self._stop.wait(max(0.0, next_scrape - time.monotonic()))

    def mark(self) -> int:
        """The index the next scrape will have: where a phase of a test begins."""
        return len(self.scrapes)

    def samples(self, step: float | None = None) -> dict[frozenset, list]:
        """Every series as ``[(time, value)]``; with ``step``, scrape ``i`` at
        ``i * step`` instead of its time."""
        series: dict[frozenset, list] = {}
        for index, (at, values) in enumerate(self.scrapes):
            for labels, value in values.items():
                series.setdefault(labels, []).append(
                    (index * step if step else at, value)
                )
        return series
