"""A run's streaming queries once checked: each started with the run's
trigger and its sink's name, a stream over a sink of the same run held back
until that sink has history, all watched while they run, stopped cleanly on
Ctrl-C or SIGTERM, and a failed one turned into a failed run."""

from __future__ import annotations

import logging
import signal
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from kedro.io.core import DatasetError
from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming import StreamingQuery

from kedro_streaming._checks.avro_replans import AvroReplans
from kedro_streaming._checks.describe import (
    addresses,
    describe_sources,
    describe_trigger,
    ends_by_itself,
)
from kedro_streaming._checks.planner_warmup import PlannerWarmUp
from kedro_streaming._checks.query_record import write_record
from kedro_streaming._checks.realtime import (
    interval_ms,
    quiet_interrupted_tasks,
    real_time_plan_problem,
)
from kedro_streaming._checks.spec import RunSpec, sink_read_as
from kedro_streaming._dataset import SparkStreamingDataset
from kedro_streaming._observe.endpoint import POLL_SECONDS, serve_the_failure
from kedro_streaming._observe.metrics import StreamMetrics
from kedro_streaming._observe.observations import SharedObservations
from kedro_streaming._observe.progress import ProgressLog, describe_expectations
from kedro_streaming._observe.state import StreamState
from kedro_streaming._observe.timer_warnings import (
    DeletedTimerWarnings,
    count_deleted_timer_warnings,
)
from kedro_streaming._session.session import spark_session
from kedro_streaming._spark import headline, jvm_of
from kedro_streaming.errors import StreamingConfigError, StreamingQueryFailed

# The hooks' lines: projects' logging.yml may set this logger's level.
logger = logging.getLogger("kedro_streaming.queries")


class QuerySupervisor:
    """Starts, watches and stops one run's streaming queries. Without a run
    (none checked yet) it has none to start."""

    def __init__(
        self,
        run: RunSpec | None = None,
        *,
        metrics: StreamMetrics | None = None,
        serve_after_failure: float = 0.0,
        planner_warm_up: int = 0,
        records: dict[str, dict[str, Any] | None] | None = None,
    ) -> None:
        self._run = run or RunSpec()
        # What to record beside each query's checkpoint once it started.
        self._records = records or {}
        catalog, pipeline = (run.catalog, run.pipeline) if run else (None, None)
        self._triggers = self._run.triggers()
        self._state = self._run.state or StreamState.from_settings({})
        self._metrics = metrics
        self._serve_after_failure = serve_after_failure
        self._progress = ProgressLog(self._state, metrics)
        self._queries: dict[str, StreamingQuery] = {}
        self._observations = SharedObservations()
        self._replans = AvroReplans(catalog, pipeline)
        self._signals = StopSignals()
        self._failed = False
        self._planner_warm_up = planner_warm_up
        self._warm_ups: list[PlannerWarmUp] = []
        # What puts the nodes' own functions back (the dry run replays them).
        self.put_back_nodes: Callable[[], None] = _nothing
        self._put_back_loggers: Callable[[], None] = _nothing
        # Spark's warning for a missing timer deleted, counted from the
        # first query's start; None before it, or over Spark Connect.
        self._timer_warnings: DeletedTimerWarnings | None = None
        self._counting_timer_warnings = False

    def watch_signals(self) -> None:
        self._signals.install()

    def start(self, name: str, data: Any) -> None:
        """Starts a sink's query, named after the sink, with the run's trigger."""
        dataset = self._dataset(name)
        if dataset is None or name not in self._triggers:
            return
        if dataset.real_time:
            problem = real_time_plan_problem(data, spark_session().version)
            if problem:
                self.stop_all()
                raise StreamingConfigError(f"'{name}': {problem}.")
        self._observations.report_once(name, data, self._progress, self._checkpoint)
        if not self._counting_timer_warnings:
            self._counting_timer_warnings = True
            self._timer_warnings = count_deleted_timer_warnings(data.sparkSession)
        missed = self._state.note_unlogged(name, self._checkpoint(name))
        if missed:
            logger.warning(
                "Query %s: %s committed by an earlier run that ended before it "
                "logged %s (killed): not in the query's totals of rows, which "
                "count %s as unlogged.",
                name,
                f"batch {missed[0]} was"
                if len(missed) == 1
                else f"batches {missed[0]} to {missed[-1]} were",
                *(("it", "it") if len(missed) == 1 else ("them", "them")),
            )
        try:
            query = dataset.start(data, trigger=self._triggers[name], query_name=name)
        except (DatasetError, StreamingConfigError) as error:
            self.stop_all()
            raise StreamingConfigError(f"'{name}': {error}") from None
        self._started(name, query)
        write_record(dataset.checkpoint, self._records.get(name))
        if dataset.real_time:
            self._warm_up(name, data)
        self._state.heartbeat(list(self._queries), force=True)
        logger.info(
            "Started streaming query '%s' (id %s) from %s: %s.",
            name,
            self._queries[name].id,
            describe_sources(self._run.sources_of(name)),
            describe_trigger(self._triggers[name]),
        )

    def _warm_up(self, name: str, data: Any) -> None:
        """Warms the planner up while a Real-Time Mode query reads its first
        batch (``realtime_planner_warm_up`` plannings)."""
        jvm = jvm_of(data.sparkSession)
        if jvm is None or not self._planner_warm_up:  # Spark Connect: the server's
            return
        interval = interval_ms(jvm, self._triggers[name]["realTime"])
        warm_up = PlannerWarmUp(data, interval / 1000, times=self._planner_warm_up)
        warm_up.start()
        self._warm_ups.append(warm_up)

    def _restart(self, name: str, frame: Any) -> None:
        """Starts the query of sink ``name`` again, on a replanned ``frame``."""
        dataset = self._dataset(name)
        trigger = self._triggers[name]
        self._started(name, dataset.start(frame, trigger=trigger, query_name=name))

    def _started(self, name: str, query: StreamingQuery) -> None:
        self._queries[name] = query
        if self._metrics is not None:
            self._metrics.started(name, query, self._triggers[name])

    def hold_back(self, read: str) -> None:
        """Holds back a read of a sink this run writes until it has history:
        a stream over it, or a table of the same name transcoded (Kedro's
        ``table@changes`` written, ``table@table`` read)."""
        name = sink_read_as(read, self._queries) or read
        query = self._queries.get(name)
        dataset = self._dataset(name)
        if query is None or dataset is None:
            return
        bounded = "availableNow" in self._triggers[name]
        # Bounded: all of it, so that the reader's batches are the same as in
        # separate runs. Continuous: any committed history (a restart has some).
        logger.info(
            "Waiting for '%s' to %s before reading %s.",
            name,
            "finish" if bounded else "have committed data",
            "it as a stream" if read == name else f"it as '{read}'",
        )
        self._wait(lambda: not query.isActive or (not bounded and dataset.exists()))

    def run_to_the_end(self) -> None:
        """Keeps the run alive while any query runs; fails if one fails."""
        if not all(ends_by_itself(self._triggers[name]) for name in self._queries):
            logger.info(
                "Streaming queries running: %s. Press Ctrl-C to stop.",
                ", ".join(self._queries),
            )
        elif self._queries:  # each stops by itself once it has read what is there
            logger.info(
                "Waiting for %s to read what is there.", ", ".join(self._queries)
            )
        self._wait(lambda: not any(q.isActive for q in self._queries.values()))
        self._update_progress()  # the last progress lines, then the totals
        log_totals(self._progress, self._queries, self._triggers)

    def end(self) -> None:
        """The run's end, however it ends: the nodes, the signal handlers
        and the endpoint as they were before it."""
        self.put_back_nodes()
        self.put_back_nodes = _nothing
        self._put_back_loggers()
        self._put_back_loggers = _nothing
        if self._timer_warnings is not None:
            self._timer_warnings.stop()
            self._timer_warnings = None
        self._state.stopped(list(self._queries))
        if self._metrics is not None and self._failed:
            serve_the_failure(
                self._serve_after_failure, self._triggers, self._signals.requested
            )
        self._signals.restore()
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None

    def stop_all(self, requested: bool = False) -> None:
        """Stops every query; ``requested`` (Ctrl-C, SIGTERM): without Spark's
        errors for the Real-Time Mode tasks that the stop interrupts."""
        for warm_up in self._warm_ups:
            warm_up.stop()
        if requested and any(
            query.isActive and self._real_time(name)
            for name, query in self._queries.items()
        ):
            self._put_back_loggers = quiet_interrupted_tasks(spark_session())
        for name, query in self._queries.items():
            if query.isActive:
                logger.info("Stopping streaming query '%s'.", name)
                query.stop()

    def _update_progress(self) -> None:
        for name, query in self._queries.items():
            self._progress.update(name, query)
            if self._metrics is None:
                continue
            if query.isActive:
                self._metrics.look(name, query)
            elif query.exception() is None:  # else failed, set by `_wait`
                self._metrics.status(name, "stopped")
        # After the progress lines of the batches that logged them.
        if self._timer_warnings is not None:
            self._timer_warnings.say_once()

    def _wait(self, done: Callable[[], bool]) -> None:
        """Polls until ``done()``, a stop request or a failed query."""
        while True:
            self._update_progress()
            self._state.heartbeat([n for n, q in self._queries.items() if q.isActive])
            for name, query in list(self._queries.items()):
                error = query.exception()
                if error is not None and not self._replans.replanned(
                    name, error, self._restart
                ):
                    self._fail(name, error)
            if self._signals.requested():
                self.stop_all(requested=True)
                return
            if done():
                return
            # Blocks until a query ends or the poll interval passes, so that a
            # bounded run goes on the moment its queries finish.
            active = next((q for q in self._queries.values() if q.isActive), None)
            if active is None:
                time.sleep(POLL_SECONDS)
                continue
            try:
                active.awaitTermination(POLL_SECONDS)
            except StreamingQueryException:
                pass  # reported by the loop, with the query's name

    def _fail(self, name: str, error: Exception) -> None:
        """Stops the other queries and fails the run with the query's reason."""
        self._failed = True
        if self._metrics is not None:
            self._metrics.status(name, "failed")
        self.stop_all()
        sink = self._dataset(name)
        topics = addresses(
            {**self._run.sources_of(name), **({name: sink} if sink else {})}
        )
        raise StreamingQueryFailed(
            f"Streaming query '{name}'{topics} failed: {headline(error)}\n"
            "Its checkpoint is intact: fix the cause and run again to "
            "resume from the last committed batch."
        ) from error

    def _real_time(self, name: str) -> bool:
        dataset = self._dataset(name)
        return dataset is not None and dataset.real_time

    def _checkpoint(self, name: str) -> str | None:
        dataset = self._dataset(name)
        return dataset.checkpoint if dataset is not None else None

    def _dataset(self, name: str) -> SparkStreamingDataset | None:
        return self._run.sinks.get(name)


class StopSignals:
    """Ctrl-C and SIGTERM while a run's queries run: the first asks them to
    stop, the second forces (``KeyboardInterrupt``)."""

    def __init__(self) -> None:
        self._requested = False
        self._previous: dict[int, Any] = {}

    def requested(self) -> bool:
        return self._requested

    def install(self) -> None:
        def request_stop(signum, frame):
            if self._requested:
                raise KeyboardInterrupt
            logger.info(
                "Received %s: stopping streaming queries (repeat to force).",
                signal.Signals(signum).name,
            )
            self._requested = True

        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[signum] = signal.signal(signum, request_stop)
            except ValueError:  # not the main thread: leave signals alone
                return

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}


def log_totals(
    progress: ProgressLog,
    queries: dict[str, StreamingQuery],
    triggers: dict[str, dict[str, Any]],
) -> None:
    """One line of totals per query, after its last progress lines."""
    for name in queries:
        totals = progress.totals.get(name, Counter())
        late = totals["late_state_rows_dropped"]
        stateful = name in progress.stateful
        logger.info(
            "Query %s ended: %d batches, %d rows in, %d written, %d quarantined%s%s.",
            name,
            totals["batches"],
            totals["input_rows"],
            totals["rows_written"],
            totals["quarantined"],
            f", {late} late state rows dropped" if stateful else "",
            describe_expectations(dict(progress.expectation_totals.get(name, {}))),
        )
        if "realTime" in triggers.get(name, {}):
            # Its batch runs from one checkpoint to the next: what a stop
            # cut short was read and written, but never reported.
            logger.info(
                "Query %s: in Real-Time Mode these totals count the batches "
                "that reached a checkpoint; the records of the batch the stop "
                "cut short are not in them (its sink has them; the next run "
                "writes them again).",
                name,
            )


def _nothing() -> None:
    pass
