"""One log line per micro-batch of every query, with running totals."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator
from typing import Any

from pyspark.sql.streaming import StreamingQuery

from kedro_streaming._connectors.base import ROWS_READ_METRIC, ROWS_WRITTEN_METRIC
from kedro_streaming._connectors.changes import take_outcomes
from kedro_streaming._nodes.expectations import (
    EXPECTATIONS_METRIC,
    UNPARSED,
    rule_counts,
)
from kedro_streaming._observe.metrics import StreamMetrics
from kedro_streaming._observe.state import StreamState, batch_record
from kedro_streaming._observe.state_operators import describe_state, state_operators
from kedro_streaming._spark import java_query

# Named as before 0.7.0: projects' logging.yml may set its level.
logger = logging.getLogger("kedro_streaming.progress")

# A node reports rows it sends to quarantine by observing a metric column of
# this name (see `DataFrame.observe`); each progress line shows it.
QUARANTINED_FIELD = "quarantined"


class ProgressLog:
    """Logs one line per micro-batch of every query, and keeps running totals
    (no per-batch history: a long run does not grow the driver's memory).

    Reports are read as JSON: PySpark's ``StreamingQueryListener`` converts
    each field by field through py4j (about 70 ms of CPU per report).
    """

    def __init__(
        self, state: StreamState | None = None, metrics: StreamMetrics | None = None
    ) -> None:
        self.totals: dict[str, Counter] = {}
        # Per query: the records each expectation caught (and `unparsed`).
        self.expectation_totals: dict[str, Counter] = {}
        # Queries whose reports carry stateful operators (watermark, state).
        self.stateful: set[str] = set()
        self._state = state
        self._metrics = metrics
        self._last_seen: dict[str, tuple[str, int]] = {}
        # Per query: observed metrics that another query of the run reports.
        self._left_to_others: dict[str, set[str]] = {}

    def leave_to(self, name: str, metrics: set[str]) -> None:
        """Leaves ``metrics`` out of query ``name``'s figures: another query
        observes the same DataFrame and reports them."""
        self._left_to_others.setdefault(name, set()).update(metrics)

    def update(self, name: str, query: StreamingQuery) -> None:
        """Logs and counts the reports of ``query`` made since the last update."""
        seen = self._last_seen.get(name, ("", -1))
        unseen = []
        for report in reports_newest_first(query):
            if (report["timestamp"], report["batchId"]) <= seen:
                break
            unseen.append(report)
        for report in reversed(unseen):
            # Spark also reports triggers that found nothing to do; they run
            # no batch (no addBatch), so they are neither logged nor counted.
            if "addBatch" in report.get("durationMs", {}):
                self._log(name, report)
        if unseen:
            self._last_seen[name] = (unseen[0]["timestamp"], unseen[0]["batchId"])

    def _log(self, name: str, report: dict[str, Any]) -> None:
        states = report.get("stateOperators", [])
        left = self._left_to_others.get(name, set())
        metrics = {
            metric: metric_row(row)
            for metric, row in report.get("observedMetrics", {}).items()
            if metric not in left
        }
        # Per source: Spark Connect's reports carry no top-level totals.
        sources = report.get("sources", [])
        batch = {
            "batches": 1,
            "input_rows": rows_read(metrics, sources),
            "rows_written": metrics.get(ROWS_WRITTEN_METRIC, {}).get("rows", 0),
            # Rows a node counted as quarantined (an observed `quarantined` metric).
            "quarantined": sum(
                row.get(QUARANTINED_FIELD, 0) for row in metrics.values()
            ),
            # Spark's numRowsDroppedByWatermark: rows that reached a stateful
            # operator after the watermark had passed them. An aggregation
            # pre-aggregates each micro-batch before its state, so there a
            # row is one group (window and key) of the batch, not a record.
            "late_state_rows_dropped": sum(
                state.get("numRowsDroppedByWatermark", 0) for state in states
            ),
        }
        caught = expectation_counts(metrics.get(EXPECTATIONS_METRIC))
        # Event time and state only for a query that keeps state.
        if states:
            self.stateful.add(name)
        stateful = (
            f", watermark {_watermark(report)}, "
            f"{sum(state.get('numRowsTotal', 0) for state in states)} state rows "
            f"({describe_state(state_operators(report))}), "
            f"{batch['late_state_rows_dropped']} late state rows dropped"
            if states
            else ""
        )
        logger.info(
            "Query %s batch %d: %d rows in, %d written, %d quarantined, %.1f rows/s, "
            "%d ms%s%s",
            name,
            report["batchId"],
            batch["input_rows"],
            batch["rows_written"],
            batch["quarantined"],
            sum(source.get("processedRowsPerSecond", 0.0) for source in sources),
            report.get("batchDuration", 0),
            stateful,
            describe_expectations(caught),
        )
        self.totals.setdefault(name, Counter()).update(batch)
        self.expectation_totals.setdefault(name, Counter()).update(caught)
        # The log's record, and the Prometheus series from the same record.
        record = batch_record(name, report, batch, caught)
        # A table kept from changes: what its micro-batch did (scd.py).
        record.update(take_outcomes(report.get("id", ""), report["batchId"]) or {})
        if self._state is not None:
            self._state.append(record)
        if self._metrics is not None:
            self._metrics.record(record)


def rows_read(metrics: dict[str, dict], sources: list[dict]) -> int:
    """The rows a batch read: what the plugin's sources counted
    (``ROWS_READ_METRIC``), else Spark's numInputRows.

    Example:
        >>> rows_read({"rows_read:0": {"rows": 7}, "rows_read:3": {"rows": 2}}, [])
        9
        >>> rows_read({}, [{"numInputRows": 4}])
        4
    """
    counted = [
        row.get("rows", 0)
        for name, row in metrics.items()
        if name.split(":")[0] == ROWS_READ_METRIC
    ]
    if counted:
        return sum(counted)
    return sum(source.get("numInputRows", 0) for source in sources)


def expectation_counts(metrics: dict[str, Any] | None) -> dict[str, int]:
    """The records each expectation caught in a batch, and ``unparsed``; the
    ones that caught none are left out."""
    if not metrics:
        return {}
    counts = {UNPARSED: int(metrics.get(UNPARSED, 0)), **rule_counts(metrics)}
    return {rule: count for rule, count in counts.items() if count}


def describe_expectations(caught: dict[str, int]) -> str:
    """``caught`` for a log line: ", expectations: unparsed 2, trip_speed 1"."""
    if not caught:
        return ""
    return ", expectations: " + ", ".join(f"{k} {v}" for k, v in caught.items())


def metric_row(row: dict[str, Any]) -> dict[str, Any]:
    """An observed metric's row as ``{column: value}`` (Spark Connect's too)."""
    if "values" in row and "schema" in row:
        names = [field["name"] for field in row["schema"]["fields"]]
        return dict(zip(names, row["values"], strict=False))
    return row


def reports_newest_first(query: StreamingQuery) -> Iterator[dict[str, Any]]:
    """The query's recent progress reports, newest first, each read when
    asked for: PySpark's ``recentProgress`` takes seconds for 100 of them."""
    jquery = java_query(query)
    if jquery is None:  # Spark Connect: the reports arrive as JSON already.
        for report in reversed(query.recentProgress):
            yield json.loads(report.json)
        return
    # Classic: fetched one by one, so that only the unseen ones cross py4j.
    reports = jquery.recentProgress()
    for index in range(len(reports) - 1, -1, -1):
        yield json.loads(reports[index].json())


def _watermark(report: dict) -> str:
    """The query's watermark for its progress line (Spark reports the epoch
    until it has seen an event time)."""
    watermark = report.get("eventTime", {}).get("watermark")
    if not watermark:
        return "none"
    return "not yet set" if watermark.startswith("1970-01-01T00:00:00") else watermark
