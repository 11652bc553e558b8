"""The run's streaming figures as Prometheus metrics, served while it runs
(the series: the project's docs/operating.md).

Each series is taken from the progress log's own record of a micro-batch
(``state.batch_record``), so the endpoint and ``progress.jsonl`` never
disagree. One label, ``query``, is the sink's name.
"""

from __future__ import annotations

import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Enum,
    Gauge,
    Histogram,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily

from kedro_streaming.errors import StreamingConfigError

STATUSES = ("running", "stopped", "failed")
# The units of Spark's interval strings ("10 seconds", "1 minute 30 seconds").
_SECONDS_PER_UNIT = {
    "microsecond": 1e-6,
    "millisecond": 1e-3,
    "second": 1.0,
    "minute": 60.0,
    "hour": 3600.0,
    "day": 86400.0,
    "week": 604800.0,
}
# Batch durations: from a 1-second trigger's batches to a backlog's.
_DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)


class _SnapshotRegistry(CollectorRegistry):
    """A registry whose scrape never sees a batch half counted."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def collect(self) -> Iterator[Any]:
        with self.lock:
            families = list(super().collect())
        yield from families


class StreamMetrics:
    """The series of one run, in a registry of its own, and their endpoint."""

    def __init__(self) -> None:
        self.registry = _SnapshotRegistry()
        query = ["query"]

        def counter(name: str, text: str, labels: list[str] = query) -> Counter:
            return Counter(f"kedro_stream_{name}", text, labels, registry=self.registry)

        def gauge(name: str, text: str, labels: list[str] = query) -> Gauge:
            return Gauge(f"kedro_stream_{name}", text, labels, registry=self.registry)

        self._batches = counter("batches", "Micro-batches run.")
        self._input_rows = counter("input_rows", "Rows read from the sources.")
        self._written_rows = counter("written_rows", "Rows written to the sink.")
        self._quarantined = counter(
            "quarantined_rows", "Rows the nodes counted as quarantined."
        )
        self._expectations = counter(
            "expectation_records",
            "Records each expectation caught, and records that did not parse.",
            ["query", "rule"],
        )
        self._changes = counter(
            "changes",
            "Changes reaching a Delta table kept from changes, by what became "
            "of each (docs/cdc.md).",
            ["query", "outcome"],
        )
        self._versions = counter(
            "versions",
            "Versions of a type 2 table's rows that the changes opened, closed "
            "(gave an end), rewrote or removed.",
            ["query", "change"],
        )
        self._late = counter(
            "late_state_rows_dropped",
            "Rows that reached a stateful operator after the watermark passed "
            "them; for an aggregation, late (window, key) groups of a batch.",
        )
        self._duration = Histogram(
            "kedro_stream_batch_duration_seconds",
            "How long each micro-batch took.",
            query,
            buckets=_DURATION_BUCKETS,
            registry=self.registry,
        )
        self._last_batch = gauge(
            "last_batch_timestamp_seconds", "When the last micro-batch ended."
        )
        self._state_rows = gauge("state_rows", "Rows held in the query's state.")
        self._operator_rows = gauge(
            "state_operator_rows",
            "Rows held in the state of one stateful operator of the query.",
            ["query", "operator"],
        )
        self._operator_memory = gauge(
            "state_operator_memory_bytes",
            "Memory the state store of one stateful operator reports using "
            "(RocksDB: native memory; Spark's default store: JVM heap).",
            ["query", "operator"],
        )
        self._watermark = gauge(
            "watermark_timestamp_seconds", "The query's event-time watermark."
        )
        self._kafka_lag = gauge(
            "kafka_lag_messages",
            "Messages in the partition beyond the last batch's end offset, as of "
            "that batch.",
            ["query", "topic", "partition"],
        )
        self._trigger_interval = gauge(
            "trigger_interval_seconds", "The query's processing-time trigger interval."
        )
        self._status = Enum(
            "kedro_stream_query_status",
            "The query's status in this run.",
            query,
            states=list(STATUSES),
            registry=self.registry,
        )
        # Per query, when its last batch ended: the trigger lag's origin.
        self.batch_ended: dict[str, float] = {}
        self._queries: dict[str, Any] = {}
        self._at_scrape = _AtScrape(self.batch_ended, self._queries)
        self.registry.register(self._at_scrape)
        self._server = None
        self._tls = False

    def record(self, batch: dict[str, Any]) -> None:
        """Counts one record of the progress log (``state.batch_record``)."""
        with self.registry.lock:
            self._record(batch)

    def _record(self, batch: dict[str, Any]) -> None:
        query = batch["query"]
        self._batches.labels(query).inc()
        self._input_rows.labels(query).inc(batch["input_rows"])
        self._written_rows.labels(query).inc(batch["rows_written"])
        self._quarantined.labels(query).inc(batch["quarantined"])
        self._late.labels(query).inc(batch["late_state_rows_dropped"])
        for rule, records in batch["expectations"].items():
            self._expectations.labels(query, rule).inc(records)
        for outcome, changes in batch.get("changes", {}).items():
            self._changes.labels(query, outcome).inc(changes)
        for change, versions in batch.get("versions", {}).items():
            self._versions.labels(query, change).inc(versions)
        self._duration.labels(query).observe(batch["duration_ms"] / 1000)
        ended = unix_time(batch["time"]) + batch["duration_ms"] / 1000
        self._last_batch.labels(query).set(ended)
        self.batch_ended[query] = ended
        if batch.get("state_rows") is not None:
            self._state_rows.labels(query).set(batch["state_rows"])
        for operator in batch.get("state_operators", []):
            labels = (query, operator["name"])
            self._operator_rows.labels(*labels).set(operator["rows"])
            self._operator_memory.labels(*labels).set(operator["memory_bytes"])
        if batch["watermark"]:
            self._watermark.labels(query).set(unix_time(batch["watermark"]))
        for source in batch["sources"]:
            for topic, partitions in (source.get("kafka_lag") or {}).items():
                for partition, lag in partitions.items():
                    self._kafka_lag.labels(query, topic, partition).set(lag)

    def started(self, name: str, query: Any, trigger: dict[str, Any]) -> None:
        """Reports a query that has just started: status running, counters at 0,
        its trigger interval, and Spark's status of it at each scrape."""
        self.status(name, "running")
        with self.registry.lock:
            self._queries[name] = query
            interval = trigger_interval_seconds(trigger)
            if interval is not None:
                self._trigger_interval.labels(name).set(interval)

    def look(self, name: str, query: Any) -> None:
        """Notes whether Spark's status shows ``query`` idle now (the origin of
        its time without progress)."""
        with self.registry.lock:
            self._at_scrape.look(name, query.status, time.time())

    def status(self, query: str, status: str) -> None:
        """Sets the query's status: one of ``STATUSES``. A query that starts
        gets its counters at 0, so that its series exist before its first batch."""
        with self.registry.lock:
            if status == "running":
                for counter in (self._batches, self._input_rows, self._written_rows):
                    counter.labels(query)
                for counter in (self._quarantined, self._late, self._duration):
                    counter.labels(query)
            self._status.labels(query).state(status)

    def serve(self, address: str, port: int, tls: dict[str, str] | None = None) -> None:
        """Serves ``/metrics`` at ``address:port`` until ``close``: over HTTPS
        with ``tls``' ``certfile`` and ``keyfile``, to clients whose
        certificate ``client_cafile`` signed only, if given."""
        tls = {key: value for key, value in (tls or {}).items() if value}
        if tls and not {"certfile", "keyfile"} <= tls.keys():
            raise StreamingConfigError(
                "The metrics endpoint's TLS needs both metrics_tls_certfile and "
                "metrics_tls_keyfile in streaming.yml (and metrics_tls_client_cafile "
                "to require client certificates)."
            )
        if "client_cafile" in tls:
            tls["client_auth_required"] = True
        self._tls = bool(tls)
        try:
            self._server, _ = start_http_server(
                port, address, registry=self.registry, **tls
            )
        except (ssl.SSLError, FileNotFoundError) as error:
            raise StreamingConfigError(
                f"Cannot serve the Prometheus metrics over TLS ({error}): check "
                "metrics_tls_certfile, metrics_tls_keyfile and "
                "metrics_tls_client_cafile in streaming.yml."
            ) from None
        except OSError as error:
            raise port_taken(address, port, error) from error

    @property
    def scheme(self) -> str:
        """``https`` when it serves over TLS, else ``http``."""
        return "https" if self._tls else "http"

    @property
    def port(self) -> int | None:
        """The port it serves on, while it does."""
        return self._server.server_port if self._server else None

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def check_port_free(address: str, port: int) -> None:
    """Fails unless the metrics endpoint could bind ``address:port``: a
    port another process holds fails the run before Spark starts."""
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as probe:
        # As the endpoint's HTTP server: a port in TIME_WAIT is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as error:
            raise port_taken(address, port, error) from None


def port_taken(address: str, port: int, error: OSError) -> StreamingConfigError:
    return StreamingConfigError(
        f"Cannot serve the Prometheus metrics at {address}:{port} "
        f"({error.strerror}): run with `--params metrics_port=<a free "
        "port>` (another run may have this one), or "
        "`--params metrics_port=0` for no endpoint."
    )


class _AtScrape:
    """The gauges of the moment of each scrape."""

    def __init__(self, batch_ended: dict[str, float], queries: dict[str, Any]):
        self._batch_ended = batch_ended
        self._queries = queries
        # Per query, when Spark's status last showed it idle. Without it, a
        # query idle for an hour that gets input would look stalled for an
        # hour during its first batch.
        self._idle_at: dict[str, float] = {}

    def look(self, name: str, status: dict[str, Any], now: float) -> None:
        """Notes Spark's ``status`` of the query at Unix time ``now``."""
        if not status["isTriggerActive"] and not status["isDataAvailable"]:
            self._idle_at[name] = now

    def seconds_without_progress(self, query: str, now: float) -> float:
        """Since the query's last batch ended or it was last seen idle."""
        ended = self._batch_ended[query]
        return max(now - max(ended, self._idle_at.get(query, ended)), 0.0)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        since = GaugeMetricFamily(
            "kedro_stream_seconds_since_last_batch",
            "Seconds since the query's last micro-batch ended (the trigger lag).",
            labels=["query"],
        )
        now = time.time()
        for query, ended in self._batch_ended.items():
            since.add_metric([query], max(now - ended, 0.0))
        active = GaugeMetricFamily(
            "kedro_stream_trigger_active",
            "1 while Spark is in one of the query's triggers: getting its sources' "
            "offsets or running a batch.",
            labels=["query"],
        )
        available = GaugeMetricFamily(
            "kedro_stream_new_data_available",
            "1 when Spark's last look at the query's sources found data it had "
            "not processed.",
            labels=["query"],
        )
        for name, query in self._queries.items():
            status = query.status
            self.look(name, status, now)
            active.add_metric([name], float(status["isTriggerActive"]))
            available.add_metric([name], float(status["isDataAvailable"]))
        without = GaugeMetricFamily(
            "kedro_stream_seconds_without_progress",
            "Seconds since the query's last micro-batch ended or Spark's status "
            "last showed it idle (no trigger running, no input waiting), "
            "whichever is later.",
            labels=["query"],
        )
        for query in self._batch_ended:
            without.add_metric([query], self.seconds_without_progress(query, now))
        yield from (since, active, available, without)

    def describe(self) -> list[GaugeMetricFamily]:
        return []


def trigger_interval_seconds(trigger: dict[str, Any]) -> float | None:
    """A ``processingTime`` trigger's interval in seconds; ``None`` for other
    triggers, or an interval string of units other than Spark's usual ones."""
    text = str(trigger.get("processingTime", "")).lower().removeprefix("interval")
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+?)s?(?=\s|$)", text.strip())
    if not parts or any(unit not in _SECONDS_PER_UNIT for _, unit in parts):
        return None
    return sum(float(number) * _SECONDS_PER_UNIT[unit] for number, unit in parts)


def unix_time(iso: str) -> float:
    """Spark's ISO-8601 UTC time as a Unix time."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
