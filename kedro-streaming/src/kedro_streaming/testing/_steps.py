"""What one step of a ``StreamTest`` did, per sink: its rows, batches and
Spark's figures, read from the step's progress reports (``Step``)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, Row

from kedro_streaming._nodes.expectations import EXPECTATIONS_METRIC
from kedro_streaming._observe.metrics import unix_time
from kedro_streaming._observe.progress import expectation_counts, metric_row
from kedro_streaming._observe.state_operators import StateOperator, state_operators


@dataclass
class Step:
    """What one sink's query did in one step.

    Attributes:
        rows: The rows the sink was given, sorted: in append and update mode
            those of every micro-batch of the step, in complete mode the
            result table as the step's last micro-batch wrote it.
        batches: The rows of each micro-batch of the step, sorted, in order;
            a batch without data (run when the watermark moved) is there too.
        input_rows: Rows read from the streaming inputs.
        watermark: The query's watermark after the step, in the local time
            zone as PySpark gives timestamps; ``None`` without a watermark or
            before the first event.
        late_state_rows_dropped: Spark's ``numRowsDroppedByWatermark``: rows
            that reached a stateful operator after the watermark passed them.
            An aggregation sums each micro-batch per group first, so there it
            counts late groups (window and key), not records.
        state_rows: Rows held in the query's state after the step.
        operators: Each stateful operator (``StateOperator``): its rows and
            memory after the step, and what the step's batches removed from
            its state, dropped as late and (``transformWithState``) the timers
            they set, the timers that fired or were deleted, and the values
            whose time to live ran out.
        expectations: Records each expectation caught (``check_expectations``),
            and ``unparsed``; those that caught none are left out.
        progress: Spark's progress reports of the step, as dictionaries.
        table: A sink kept from changes (``changes=``): the table's rows
            after the step, by key (and version); else ``None``.
        changes: Such a sink's changes of the step, by what became of each
            (the labels of the ``kedro_stream_changes_total`` metric); those
            with none left out.
        versions: Type 2's versions the step opened, closed, rewrote and
            removed; those with none left out.
    """

    rows: list[Row] = field(default_factory=list)
    batches: list[list[Row]] = field(default_factory=list)
    input_rows: int = 0
    watermark: datetime | None = None
    late_state_rows_dropped: int = 0
    state_rows: int = 0
    operators: list[StateOperator] = field(default_factory=list)
    expectations: dict[str, int] = field(default_factory=dict)
    progress: list[dict[str, Any]] = field(default_factory=list)
    table: list[Row] | None = None
    changes: dict[str, int] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)


def collector(
    batches: list[tuple[int, list[Row]]],
    done: threading.Event,
    apply: Callable[[DataFrame, int], None] | None = None,
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function that keeps each micro-batch's rows, sorted,
    in ``batches`` (with its id), and sets ``done`` after each; ``apply``,
    a sink's own, runs first."""

    def collect(batch: DataFrame, batch_id: int) -> None:
        if apply is not None:
            apply(batch, batch_id)
        rows = sorted(batch.collect(), key=sort_key)
        # A batch given again before any step took it was never committed
        # (its query stopped by `close` or `restart` in between): once.
        if batches and batches[-1][0] == batch_id:
            batches.pop()
        batches.append((batch_id, rows))
        done.set()

    return collect


def step_result(
    batches: list[list[Row]], reports: list[dict[str, Any]], mode: str, last: Step
) -> Step:
    """The ``Step`` of one sink: its ``batches`` and Spark's progress
    ``reports`` of the step, in output ``mode``, after the ``last`` step."""
    # Spark also reports triggers that found nothing to do and ran no batch.
    ran = [report for report in reports if "addBatch" in report.get("durationMs", {})]
    if not ran:
        return Step(
            watermark=last.watermark,
            state_rows=last.state_rows,
            operators=[
                replace(
                    op,
                    **dict.fromkeys(_DONE, 0),
                    **dict.fromkeys(_DONE_TWS if op.timers_set is not None else (), 0),
                )
                for op in last.operators
            ],
            progress=reports,
        )
    watermark = ran[-1].get("eventTime", {}).get("watermark")
    caught: Counter = Counter()
    for report in ran:
        metrics = report.get("observedMetrics", {}).get(EXPECTATIONS_METRIC)
        caught.update(expectation_counts(metrics and metric_row(metrics)))
    if mode == "complete":
        rows = batches[-1] if batches else []
    else:
        rows = sorted((row for batch in batches for row in batch), key=sort_key)
    return Step(
        rows=rows,
        batches=batches,
        input_rows=sum(report.get("numInputRows", 0) for report in ran),
        watermark=_local_time(watermark) if watermark else None,
        late_state_rows_dropped=sum(
            state.get("numRowsDroppedByWatermark", 0)
            for report in ran
            for state in report.get("stateOperators", [])
        ),
        state_rows=sum(
            state.get("numRowsTotal", 0) for state in ran[-1].get("stateOperators", [])
        ),
        operators=_step_operators(ran),
        expectations=dict(caught),
        progress=reports,
    )


# What a step's batches did to an operator's state; the timers and values
# whose time ran out are transformWithState's (None for other operators).
_DONE = ("rows_removed", "late_rows_dropped")
_DONE_TWS = ("timers_set", "timers_removed", "ttl_values_removed")


def _step_operators(ran: list[dict[str, Any]]) -> list[StateOperator]:
    """Each operator's state after the step's last batch, with what all of
    the step's batches removed, dropped and fired."""
    batches = [state_operators(report) for report in ran]

    def total(index: int, figure: str) -> int | None:
        values = [getattr(ops[index], figure) for ops in batches if len(ops) > index]
        return None if values[-1] is None else sum(v or 0 for v in values)

    return [
        replace(last, **{figure: total(index, figure) for figure in _DONE + _DONE_TWS})
        for index, last in enumerate(batches[-1])
    ]


def _local_time(iso: str) -> datetime | None:
    """Spark's ISO-8601 UTC watermark as PySpark returns timestamps: naive, in
    the local time zone; ``None`` for 0, Spark's watermark before any event."""
    moment = unix_time(iso)
    return datetime.fromtimestamp(moment) if moment else None


def sort_key(value: Any) -> tuple:
    """Orders rows whatever their nulls: None first, then values."""
    if isinstance(value, tuple):
        return (1, tuple(sort_key(item) for item in value))
    return (0,) if value is None else (1, value)
