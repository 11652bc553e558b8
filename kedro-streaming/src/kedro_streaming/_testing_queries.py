"""How the stream harness runs a step's query: ``availableNow`` for most,
and, for processing-time timers, a query that runs from step to step."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from kedro_streaming._run.metrics import unix_time
from kedro_streaming._run.progress import reports_newest_first

# A query with processing-time timers runs a batch a second between steps,
# so that its timers fire within a second of their time; back to back ("0
# seconds"), its batches without data kept the two cores busy as the test
# slept (the spells recipe of the project's docs/stateful.md: 155 CPU seconds
# in 89 s, against 121 at one a second).
_CLOCKED_TRIGGER = "1 second"


def start_step_query(writer: DataStreamWriter, clocked: bool) -> StreamingQuery:
    """The step's query: ``availableNow``, which stops by itself once the
    step's data (and the batch the watermark asks for) is through; for
    processing-time timers, which ``availableNow`` would never finish, batch
    after batch."""
    if clocked:
        return writer.trigger(processingTime=_CLOCKED_TRIGGER).start()
    return writer.trigger(availableNow=True).start()


def until_caught_up(  # noqa: PLR0913 (the step's facts)
    query: StreamingQuery,
    landed: dict[str, int],
    reads: set[str],
    seen: int,
    *,
    began: float,
    timeout: float = 300,
) -> list[dict[str, Any]]:
    """The reports of the batches after batch ``seen``, up to the first one
    by which they have read every row the step landed (``landed``: folder ->
    rows) in the folders this query reads (``reads``), and one of them began
    after the step did (``began``, before it landed them: a batch that starts
    while they land may read them, and the next one fire their timers). The
    batches after it are the next step's, however late this call sees them."""
    awaited = {folder: rows for folder, rows in landed.items() if folder in reads}
    deadline = time.monotonic() + timeout
    while True:
        reports = sorted(
            (
                report
                for report in _reports_after(query, seen)
                if "addBatch" in report.get("durationMs", {})
            ),
            key=lambda report: report["batchId"],
        )
        caught = _caught_up_to(reports, awaited, began)
        if caught is not None:
            return reports[: caught + 1]
        if query.exception() is not None or time.monotonic() > deadline:
            query.stop()
            raise RuntimeError(
                f"query {query.name or query.id} did not read the step's data "
                f"within {timeout:.0f} s: {query.exception() or query.status}"
            )
        time.sleep(0.05)


def _reports_after(query: StreamingQuery, seen: int) -> list[dict[str, Any]]:
    """The query's reports of the batches after batch ``seen``: only those
    are read (a query that runs from step to step has dozens of older ones)."""
    reports = []
    for report in reports_newest_first(query):
        if report["batchId"] <= seen:
            break
        reports.append(report)
    return reports


def _caught_up_to(
    reports: list[dict[str, Any]], awaited: dict[str, int], began: float
) -> int | None:
    """The index of the first report by which every awaited row is read and
    one report began after the step (the timers due as the test slept fire
    in it); None if none is yet."""
    read: Counter = Counter()
    late_enough = False
    for index, report in enumerate(reports):
        for source in report.get("sources", []):
            for folder in awaited:
                if source["description"].endswith(f"{folder}]"):
                    read[folder] += source.get("numInputRows", 0)
        late_enough = late_enough or unix_time(report["timestamp"]) >= began
        if late_enough and all(read[f] >= rows for f, rows in awaited.items()):
            return index
    return None


def stop_between_batches(query: StreamingQuery, batch_done: threading.Event) -> None:
    """Stops a query that runs from step to step just after its
    ``foreachBatch`` call returned (``batch_done``, which the call sets), so
    that the stop interrupts Spark's own code, not the call: interrupted
    there, py4j logs an error with the whole traceback, and Spark a
    StackOverflowError (nothing is lost either way: the batch is not
    committed, and runs again at the next start)."""
    batch_done.clear()
    deadline = time.monotonic() + 60
    while query.isActive and not batch_done.wait(timeout=0.1):
        if time.monotonic() > deadline:
            break
    py4j = logging.getLogger("py4j.clientserver")
    level = py4j.level
    py4j.setLevel(logging.CRITICAL)  # if the next call began all the same
    try:
        query.stop()
    finally:
        py4j.setLevel(level)
