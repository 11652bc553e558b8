"""How the stream harness runs each sink's query, step by step
(``SinkQuery``): ``availableNow`` for most, and, for processing-time timers,
a query that runs from step to step."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import Counter
from dataclasses import replace
from itertools import takewhile
from pathlib import Path
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, Row
from pyspark.sql.streaming import StreamingQuery

from kedro_streaming._checks.stateful import transform_with_state_modes
from kedro_streaming._observe.metrics import unix_time
from kedro_streaming._observe.progress import reports_newest_first
from kedro_streaming.testing._changes import ChangesTable
from kedro_streaming.testing._steps import Step, collector, step_result

# A query with processing-time timers runs a batch a second between steps,
# so that its timers fire within a second of their time; back to back ("0
# seconds"), its batches without data kept the two cores busy as the test
# slept (the spells recipe of the project's docs/stateful.md: 155 CPU seconds
# in 89 s, against 121 at one a second).
_CLOCKED_TRIGGER = "1 second"
_STEP_TIMEOUT = 300  # seconds for a query to run a step's batches


class SinkQuery:
    """One sink's query: its checkpoint, the rows its batches gave since the
    last step, and the query itself while it runs from step to step."""

    def __init__(
        self,
        checkpoint: Path,
        mode: str,
        reads: set[str],
        table: ChangesTable | None = None,
    ) -> None:
        self._checkpoint = checkpoint
        self._mode = mode
        self._table = table  # a sink kept from changes: its Delta table
        self._reads = reads  # the input folders it reads: a step awaits them
        # The watermark and state rows of its last micro-batch, for a step in
        # which no batch runs.
        self._last = Step()
        self._collected: list[tuple[int, list[Row]]] = []  # (batch id, rows)
        self._batch_done = threading.Event()
        self._query: StreamingQuery | None = None
        self._seen = -1  # the last batch a step took, of a query that runs on

    @property
    def checkpoint(self) -> Path:
        return self._checkpoint

    @property
    def step_batch(self) -> int | None:
        """The last batch the last step took, of a query that runs from step
        to step (processing-time timers): it goes on with batches of its own
        meanwhile. None where the query stopped at the step's end."""
        return self._seen if self._clocked and self._seen >= 0 else None

    def use(self, frame: DataFrame) -> None:
        """Runs ``frame`` from the next start on (built again by a restart)."""
        self._frame = frame
        self._clocked = "ProcessingTime" in transform_with_state_modes(frame)
        self._apply = (
            None
            if self._table is None
            else self._table.applier(frame, self._checkpoint)
        )

    def start(self) -> None:
        """Starts the step's query: ``availableNow``, which stops by itself
        once the step's data (and the batch the watermark asks for) is
        through; for processing-time timers, which ``availableNow`` would
        never finish, batch after batch (unless it runs already)."""
        if self._query is None:
            writer = (
                self._frame.writeStream.outputMode(self._mode)
                .foreachBatch(collector(self._collected, self._batch_done, self._apply))
                .option("checkpointLocation", str(self._checkpoint))
            )
            trigger: dict[str, Any] = (
                {"processingTime": _CLOCKED_TRIGGER}
                if self._clocked
                else {"availableNow": True}
            )
            self._query = writer.trigger(**trigger).start()

    def finish(self, landed: dict[str, int], began: float) -> Step:
        """The ``Step`` of the query ``start`` started, once it read what the
        step ``landed`` (folder -> rows) after it ``began``."""
        query = self._query
        assert query is not None, "start() first"
        if self._clocked:
            # Spark runs batches for its timers for ever: the query runs from
            # step to step, and a step waits for a batch that began after it
            # and for its rows read. What fired meanwhile, as the test slept
            # (processing time is the system's clock), is the step's.
            reports = self._caught_up(query, landed, began)
            self._seen = max(report["batchId"] for report in reports)
        else:
            self._query = None  # stops by itself: the next step starts anew
            try:
                finished = query.awaitTermination(_STEP_TIMEOUT)
            except StreamingQueryException as error:
                raise query_failure(query, error) from None
            if not finished:
                raise _stalled(query, "finish the step's batches")
            reports = [json.loads(report.json) for report in query.recentProgress]
        # The rows of the batches reported, in order; a batch that ran since
        # (a query that runs on) is the next step's.
        last = max((report["batchId"] for report in reports), default=None)
        taken = [
            rows
            for batch_id, rows in list(self._collected)
            if last is not None and batch_id <= last
        ]
        del self._collected[: len(taken)]
        self._last = step_result(taken, reports, self._mode, self._last)
        if self._table is not None:
            ran = [
                r["batchId"] for r in reports if "addBatch" in r.get("durationMs", {})
            ]
            self._last = replace(self._last, **self._table.after(ran))
        return self._last

    def stop(self) -> None:
        """Stops a query that runs from step to step just after its
        ``foreachBatch`` call returned (the call sets ``_batch_done``), so
        that the stop interrupts Spark's own code, not the call: interrupted
        there, py4j logs an error with the whole traceback, and Spark a
        StackOverflowError (nothing is lost either way: the batch is not
        committed, and runs again at the next start)."""
        query, self._query = self._query, None
        if query is None:
            return
        self._batch_done.clear()
        deadline = time.monotonic() + 60
        while query.isActive and not self._batch_done.wait(timeout=0.1):
            if time.monotonic() > deadline:
                break
        py4j = logging.getLogger("py4j.clientserver")
        level = py4j.level
        py4j.setLevel(logging.CRITICAL)  # if the next call began all the same
        try:
            query.stop()
        finally:
            py4j.setLevel(level)

    def uncommit_last_batch(self) -> None:
        """Takes the last batch out of the checkpoint's commit log, as a crash
        between its write and its commit would: the next start runs it again."""
        commits = self._checkpoint / "commits"
        done = [int(path.name) for path in commits.glob("[0-9]*")]
        if done:
            (commits / str(max(done))).unlink()
            (commits / f".{max(done)}.crc").unlink(missing_ok=True)
            # That batch is the next step's again.
            self._seen = min(self._seen, max(done) - 1)

    def _caught_up(
        self, query: StreamingQuery, landed: dict[str, int], began: float
    ) -> list[dict[str, Any]]:
        """The reports of the batches after the last one a step took, up to
        the first by which they have read every row the step landed
        (``landed``: folder -> rows) in the folders this query reads, and one
        of them began after the step did (``began``, before it landed them: a
        batch that starts while they land may read them, and the next one fire
        their timers). The batches after it are the next step's, however late
        this call sees them."""
        awaited = {f: rows for f, rows in landed.items() if f in self._reads}
        deadline = time.monotonic() + _STEP_TIMEOUT
        while True:
            # Only the reports after that batch are read: a query that runs
            # from step to step has dozens of older ones.
            newer = takewhile(
                lambda report: report["batchId"] > self._seen,
                reports_newest_first(query),
            )
            reports = sorted(
                (r for r in newer if "addBatch" in r.get("durationMs", {})),
                key=lambda report: report["batchId"],
            )
            caught = _caught_up_to(reports, awaited, began)
            if caught is not None:
                return reports[: caught + 1]
            if query.exception() is not None:
                query.stop()
                raise query_failure(query, query.exception())
            if time.monotonic() > deadline:
                raise _stalled(query, "read the step's data")
            time.sleep(0.05)


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


def _stalled(query: StreamingQuery, what: str) -> RuntimeError:
    """Stops ``query``, which did not ``what`` in time: the error to raise,
    with where the query stood (Spark's status and its last batch)."""
    status, last = query.status, query.lastProgress
    query.stop()
    batch = "no batch yet" if last is None else f"last batch {last['batchId']}"
    return RuntimeError(
        f"query {query.name or query.id} did not {what} within {_STEP_TIMEOUT} s "
        f"({batch}; {status['message']}): see the Python workers' and the "
        "driver's output above for what it waited on."
    )


def query_failure(query: StreamingQuery, error: Any) -> RuntimeError:
    """The error of a step whose query failed, with what to do where Spark's
    Python workers could not import the module of a node's function (a UDF,
    a ``StatefulProcessor``): pytest imports a test module by its path, the
    workers by its name, from the folder the tests run in."""
    text = str(error)
    missing = re.search(r"No module named '([^']+)'", text)
    hint = (
        f"\nSpark's Python workers could not import {missing.group(1)!r}, the "
        "module of a function or processor the query runs: they import it by "
        "name from the folder pytest runs in. Define it in your package "
        "(src/), or make the test's folder a package (an __init__.py in it and "
        "in each folder above it, up to where pytest runs)."
        if missing
        else ""
    )
    return RuntimeError(f"query {query.name or query.id} failed: {text}{hint}")
