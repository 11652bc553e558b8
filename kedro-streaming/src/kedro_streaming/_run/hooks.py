"""The life of a run's streaming queries: checked, sequenced, watched, stopped.

Nodes only transform DataFrames; saving a streaming DataFrame starts a query
and returns at once. These hooks do the rest: check the run's streaming
configuration before any query starts, start each sink's query with the run's
trigger and the sink's name, hold back a stream that reads a sink written
earlier in the same run until that sink has history, keep the process alive
while queries run, stop them cleanly on Ctrl-C or SIGTERM, and turn a failed
query into a failed run.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl
from kedro.io import DataCatalog
from kedro.io.core import DatasetError
from kedro.pipeline import Pipeline
from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming import StreamingQuery

from kedro_streaming._connectors.avro import UNPLANNED_ID
from kedro_streaming._connectors.dataset import SparkStreamingDataset
from kedro_streaming._connectors.files import source_position
from kedro_streaming._run.catalog import (
    catalog_names_by_env,
    fan_out,
    query_nodes,
    query_sources,
    streaming_datasets,
)
from kedro_streaming._run.checks import (
    check_before_spark,
    check_run,
    check_runtime_params,
    run_trigger,
)
from kedro_streaming._run.console import one_line_off_terminal, short_config_errors
from kedro_streaming._run.metrics import StreamMetrics, check_port_free
from kedro_streaming._run.plans import Plans, check_plans
from kedro_streaming._run.progress import ProgressLog, describe_expectations
from kedro_streaming._run.realtime import real_time_plan_problem
from kedro_streaming._run.session import spark_session
from kedro_streaming._run.state import StreamState, streaming_settings
from kedro_streaming._spark import headline, java_frame
from kedro_streaming.errors import StreamingConfigError, StreamingQueryFailed

# Named as before 0.7.0: projects' logging.yml may set its level.
logger = logging.getLogger("kedro_streaming.queries")

_POLL_SECONDS = 0.5
# Avro schema versions a run takes in while it runs, before it fails instead.
_MAX_REPLANS = 10
_PORTS = range(65536)  # 0: no endpoint


class StreamingQueryHooks:
    """Checks, sequences, watches and stops the run's streaming queries."""

    def __init__(self) -> None:
        self._catalog: DataCatalog | None = None
        self._pipeline: Pipeline | None = None
        self._other_envs = dict
        self._config_loader: Any = None
        # Each observed metric (name, DataFrame id) and the query that reports it.
        self._observed_by: dict[tuple[str, int], str] = {}
        self._settings: dict[str, Any] = {}
        self._queries: dict[str, StreamingQuery] = {}
        self._triggers: dict[str, dict[str, Any]] = {}
        self._stop_requested = False
        self._failed = False
        self._replans = 0
        self._serve_after_failure = 0.0
        self._put_back_nodes: Callable[[], None] = _nothing
        self._previous_handlers: dict[int, Any] = {}
        self._state = StreamState.from_settings({})
        self._progress = ProgressLog()
        self._metrics: StreamMetrics | None = None

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        self._settings = streaming_settings(context.config_loader)
        one_line_off_terminal()
        short_config_errors()
        self._other_envs = lambda: catalog_names_by_env(context.config_loader)
        self._config_loader = context.config_loader
        # The progress lines are INFO: shown unless the project's logging
        # configuration sets this package's level (Kedro's default sets none).
        runtime_logger = logging.getLogger("kedro_streaming")
        if runtime_logger.level == logging.NOTSET:
            runtime_logger.setLevel(logging.INFO)

    @hook_impl
    def before_pipeline_run(
        self, run_params: dict[str, Any], pipeline: Pipeline, catalog: DataCatalog
    ) -> None:
        """Fails on a configuration that cannot work, before any query starts."""
        self._catalog = catalog
        self._pipeline = pipeline
        self._queries = {}
        self._triggers = {}
        self._observed_by = {}
        self._stop_requested = False
        self._failed = False
        self._replans = 0
        self._state = StreamState.from_settings(self._settings)
        began = time.monotonic()
        check_runtime_params(self._config_loader)
        check_before_spark(
            catalog, pipeline, self._settings, self._state, other_envs=self._other_envs
        )
        sinks = streaming_datasets(catalog, pipeline.all_outputs())
        if sinks:
            address, port = self._metrics_endpoint()
            if port:  # taken: say so before Spark starts, not after
                check_port_free(address, port)
        checking = time.monotonic() - began
        spark = spark_session()
        began = time.monotonic()
        check_run(spark, catalog, pipeline, self._settings, env=run_params.get("env"))
        # Every query built and checked before the first starts, as `validate`
        # does: a node's mistake fails the run before anything is written.
        planning = time.monotonic()
        plans = check_plans(spark, catalog, pipeline, sinks)
        planning = time.monotonic() - planning
        self._register_avro_values(sinks, plans)
        logger.info(
            "Checked the streaming configuration in %.2f s (the queries' plans "
            "%.2f s): %d sources, %d sinks.",
            checking + time.monotonic() - began,
            planning,
            len(streaming_datasets(catalog, pipeline.inputs())),
            len(sinks),
        )
        for line in fan_out(catalog, pipeline, list(sinks)):
            logger.warning("Fan-out: %s.", line)
        trigger = run_trigger(self._settings)

        # The run's trigger wins; else the sink's own; else the run's interval.
        interval = str(self._settings.get("trigger_interval", "10 seconds"))
        for name, dataset in sinks.items():
            self._triggers[name] = (
                trigger or dataset.trigger or {"processingTime": interval}
            )
        self._metrics = self._serve_metrics() if sinks else None
        self._progress = ProgressLog(self._state, self._metrics)
        self._install_signal_handlers()
        # Last: the run starts what was checked; each node runs once.
        self._put_back_nodes = plans.replay()

    @hook_impl
    def before_dataset_saved(self, dataset_name: str, data: Any, node: Any) -> None:
        """Starts a sink's query, named after the sink, with the run's trigger."""
        dataset = self._dataset(dataset_name)
        if dataset is None or dataset_name not in self._triggers:
            return
        if dataset.real_time:
            problem = real_time_plan_problem(data, spark_session().version)
            if problem:
                self._stop_all()
                raise StreamingConfigError(f"'{dataset_name}': {problem}.")
        self._report_observations_once(dataset_name, data)
        try:
            query = dataset.start(
                data, trigger=self._triggers[dataset_name], query_name=dataset_name
            )
        except (DatasetError, StreamingConfigError) as error:
            self._stop_all()
            raise StreamingConfigError(f"'{dataset_name}': {error}") from None
        self._queries[dataset_name] = query
        if self._metrics is not None:
            self._metrics.started(dataset_name, query, self._triggers[dataset_name])
        self._state.heartbeat(list(self._queries), force=True)
        logger.info(
            "Started streaming query '%s' (id %s) from %s: %s.",
            dataset_name,
            query.id,
            self._describe_sources(dataset_name),
            describe_trigger(self._triggers[dataset_name]),
        )

    @hook_impl
    def before_dataset_loaded(self, dataset_name: str, node: Any) -> None:
        """Holds back a stream over a sink this run writes until it has history."""
        query = self._queries.get(dataset_name)
        dataset = self._dataset(dataset_name)
        if query is None or dataset is None:
            return
        bounded = "availableNow" in self._triggers[dataset_name]
        # Bounded: all of it, so that the reader's batches are the same as in
        # separate runs. Continuous: any committed history (a restart has some).
        logger.info(
            "Waiting for '%s' to %s before reading it as a stream.",
            dataset_name,
            "finish" if bounded else "have committed data",
        )
        self._wait(lambda: not query.isActive or (not bounded and dataset.exists()))

    @hook_impl
    def after_pipeline_run(self, run_params: dict[str, Any]) -> None:
        """Keeps the run alive while any query runs; fails if one fails."""
        try:
            if self._queries:
                logger.info(
                    "Streaming queries running: %s. Press Ctrl-C to stop.",
                    ", ".join(self._queries),
                )
            self._wait(lambda: not any(q.isActive for q in self._queries.values()))
            self._log_totals()
        finally:
            self._end_run()

    @hook_impl
    def on_pipeline_error(self, error: Exception, run_params: dict[str, Any]) -> None:
        self._stop_all()
        self._end_run()

    def _end_run(self) -> None:
        self._put_back_nodes()
        self._put_back_nodes = _nothing
        self._state.stopped(list(self._queries))
        if self._metrics is not None and self._failed:
            self._serve_the_failure()
        self._restore_signal_handlers()
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None

    def _metrics_endpoint(self) -> tuple[str, int]:
        """``metrics_address`` and ``metrics_port`` (0: no endpoint)."""
        address = str(self._settings.get("metrics_address", "127.0.0.1"))
        port = self._settings.get("metrics_port", 0)
        with contextlib.suppress(TypeError, ValueError):
            port = int(port)
        if not isinstance(port, int) or port not in _PORTS:
            raise StreamingConfigError(
                f"metrics_port '{port}' in streaming.yml is not a port: set a "
                "number from 1 to 65535, or 0 for no Prometheus endpoint."
            )
        return address, port

    def _serve_metrics(self) -> StreamMetrics | None:
        """The run's Prometheus endpoint, unless ``metrics_port`` is 0."""
        address, port = self._metrics_endpoint()
        linger = self._settings.get("metrics_serve_after_failure", 0)
        try:
            self._serve_after_failure = float(linger)
        except (TypeError, ValueError):
            raise StreamingConfigError(
                f"metrics_serve_after_failure '{linger}' in streaming.yml is not a "
                "number of seconds: set one, or 0 to end a failed run at once."
            ) from None
        if port == 0:
            return None
        metrics = StreamMetrics()
        metrics.serve(
            address,
            port,
            tls={
                option: str(self._settings.get(f"metrics_tls_{option}") or "")
                for option in ("certfile", "keyfile", "client_cafile")
            },
        )
        logger.info(
            "Prometheus metrics of the streams: %s://%s:%d/metrics",
            metrics.scheme,
            address,
            port,
        )
        return metrics

    def _serve_the_failure(self) -> None:
        """Serves the endpoint a while after a query of a continuous run failed,
        so that Prometheus scrapes the failed status before the run ends (and
        its target with it)."""
        seconds = self._serve_after_failure
        bounded = all("availableNow" in t for t in self._triggers.values())
        if seconds <= 0 or bounded:  # a bounded run is a job: its exit code tells
            return
        logger.info(
            "Serving the failed status on the Prometheus endpoint for %g s "
            "(Ctrl-C to end now; --params metrics_serve_after_failure=0 for none).",
            seconds,
        )
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self._stop_requested:
            time.sleep(_POLL_SECONDS)

    def _log_totals(self) -> None:
        """The last progress lines, then one line of totals per query."""
        self._update_progress()
        for name in self._queries:
            totals = self._progress.totals.get(name, Counter())
            late = totals["late_state_rows_dropped"]
            stateful = name in self._progress.stateful
            logger.info(
                "Query %s ended: %d batches, %d rows in, %d written, %d quarantined"
                "%s%s.",
                name,
                totals["batches"],
                totals["input_rows"],
                totals["rows_written"],
                totals["quarantined"],
                f", {late} late state rows dropped" if stateful else "",
                describe_expectations(
                    dict(self._progress.expectation_totals.get(name, {}))
                ),
            )
            if "realTime" in self._triggers.get(name, {}):
                # Its batch runs from one checkpoint to the next: what a stop
                # cut short was read and written, but never reported.
                logger.info(
                    "Query %s: in Real-Time Mode these totals count the batches "
                    "that reached a checkpoint; the records of the batch the stop "
                    "cut short are not in them (its sink has them; the next run "
                    "writes them again).",
                    name,
                )

    def _update_progress(self) -> None:
        for name, query in self._queries.items():
            self._progress.update(name, query)
            if self._metrics is not None and not query.isActive:
                if query.exception() is None:  # else failed, set by `_wait`
                    self._metrics.status(name, "stopped")

    def _wait(self, done) -> None:
        """Polls until ``done()``, a stop request or a failed query."""
        while True:
            self._update_progress()
            self._state.heartbeat([n for n, q in self._queries.items() if q.isActive])
            for name, query in list(self._queries.items()):
                error = query.exception()
                if error is not None and self._replanned(name, error):
                    continue
                if error is not None:
                    self._failed = True
                    if self._metrics is not None:
                        self._metrics.status(name, "failed")
                    self._stop_all()
                    raise StreamingQueryFailed(
                        f"Streaming query '{name}'{self._kafka_topics(name)} "
                        f"failed: {headline(error)}\n"
                        "Its checkpoint is intact: fix the cause and run again to "
                        "resume from the last committed batch."
                    ) from error
            if self._stop_requested:
                self._stop_all()
                return
            if done():
                return
            # Blocks until a query ends or the poll interval passes, so that a
            # bounded run goes on the moment its queries finish.
            active = next((q for q in self._queries.values() if q.isActive), None)
            if active is None:
                time.sleep(_POLL_SECONDS)
                continue
            try:
                active.awaitTermination(_POLL_SECONDS)
            except StreamingQueryException:
                pass  # reported by the loop, with the query's name

    def _replanned(self, name: str, error: Exception) -> bool:
        """Plans a query again when it met an Avro schema id its plan lacks
        (a version registered while it ran): looks the id up, rebuilds the
        query's DataFrame from its sources and restarts it from its
        checkpoint, the failed micro-batch included. At most
        ``_MAX_REPLANS`` times a run."""
        found = UNPLANNED_ID.search(str(error))
        sources = {
            source: dataset
            for source, dataset in query_sources(
                self._catalog, self._pipeline, name
            ).items()
            if dataset.reads_avro
        }
        if found is None or not sources or self._replans >= _MAX_REPLANS:
            return False
        self._replans += 1
        schema_id = int(found[1])
        for dataset in sources.values():
            dataset.plan_avro_id(schema_id)
        frame = self._rebuild(name)
        query = self._dataset(name).start(
            frame, trigger=self._triggers[name], query_name=name
        )
        self._queries[name] = query
        if self._metrics is not None:
            self._metrics.started(name, query, self._triggers[name])
        subjects = ", ".join(f"'{d.avro_schemas.subject}'" for d in sources.values())
        known = any(schema_id in d.avro_schemas.writers for d in sources.values())
        logger.warning(
            "Streaming query '%s' met Avro schema id %d, %s: planned it again "
            "(%d of at most %d replans this run); it resumes from its checkpoint.",
            name,
            schema_id,
            f"registered since it started (subject {subjects})"
            if known
            else "which the registry does not have (those records are quarantined)",
            self._replans,
            _MAX_REPLANS,
        )
        return True

    def _register_avro_values(
        self, sinks: dict[str, SparkStreamingDataset], plans: Plans
    ) -> None:
        """Registers each Avro sink's value schemas before any query starts, so
        that a version the subject's compatibility refuses fails the run
        first. A sink whose sources have no history yet (a table this run
        writes first) registers when its query starts."""
        for name, dataset in sinks.items():
            if not dataset.writes_avro:
                continue
            # The dry run's DataFrame is the run's, unless it read a stand-in
            # for a sink of this run: then as the run reads that sink.
            frame = plans.frames.get(name) if name not in plans.stand_ins else None
            try:
                frame = frame if frame is not None else self._rebuild(name)
            except DatasetError:
                continue
            try:
                dataset.encode_values(frame)
            except StreamingConfigError as error:
                raise StreamingConfigError(f"'{name}': {error}") from None

    def _rebuild(self, sink: str) -> Any:
        """The sink's DataFrame made again: its query's nodes run on what the
        catalog loads now (a source's refreshed schemas among it)."""
        names = set(query_nodes(self._catalog, self._pipeline, sink))
        made: dict[str, Any] = {}
        for node in self._pipeline.nodes:  # in the order they run
            if node.name in names:
                inputs = {
                    name: made[name] if name in made else self._catalog.load(name)
                    for name in node.inputs
                }
                made.update(node.run(inputs))
        return made[sink]

    def _stop_all(self) -> None:
        for name, query in self._queries.items():
            if query.isActive:
                logger.info("Stopping streaming query '%s'.", name)
                query.stop()

    def _report_observations_once(self, name: str, data: Any) -> None:
        """Leaves a metric that an earlier query of the run already observes
        (the same node's DataFrame, fanned out to two sinks) to that query:
        each rule's figures are counted once, not once per query."""
        repeated = {}
        for observation in observed_metrics(data):
            first = self._observed_by.setdefault(observation, name)
            if first == name:
                continue
            # Counted once only where both queries read the same records: a
            # query whose checkpoint stands elsewhere reads others.
            if source_position(self._checkpoint(name)) != source_position(
                self._checkpoint(first)
            ):
                logger.info(
                    "'%s' runs the same checks as %s, from another position in "
                    "their sources (its checkpoint is not at the same offsets): "
                    "it reports its own figures.",
                    name,
                    first,
                )
                continue
            repeated[observation[0]] = first
        if repeated:
            self._progress.leave_to(name, set(repeated))
            logger.info(
                "'%s' runs the same checks as %s before it (fan-out): their "
                "figures (%s) are reported under %s only.",
                name,
                ", ".join(sorted(set(repeated.values()))),
                ", ".join(sorted(repeated)),
                ", ".join(sorted(set(repeated.values()))),
            )

    def _describe_sources(self, name: str) -> str:
        """What a query reads, for its start line: which environment's
        source a run uses shows there."""
        if self._catalog is None or self._pipeline is None:
            return "its sources"
        parts = []
        for source, dataset in query_sources(
            self._catalog, self._pipeline, name
        ).items():
            options = dataset.load_options
            topic = options.get("subscribe") or options.get("subscribePattern")
            parts.append(
                f"{source} (Kafka {topic or 'assigned partitions'})"
                if dataset.file_format == "kafka"
                else f"{source} ({dataset.file_format} at {dataset.path})"
                if dataset.path
                else f"{source} ({dataset.file_format})"
            )
        return ", ".join(parts) or "its sources"

    def _checkpoint(self, name: str) -> str | None:
        dataset = self._dataset(name)
        return dataset.checkpoint if dataset is not None else None

    def _kafka_topics(self, name: str) -> str:
        """The Kafka topics a query reads or writes, for its failure message."""
        if self._catalog is None or self._pipeline is None:
            return ""
        parts = []
        datasets = {**query_sources(self._catalog, self._pipeline, name)}
        sink = self._dataset(name)
        if sink is not None:
            datasets[name] = sink
        for dataset_name, dataset in datasets.items():
            if dataset.file_format != "kafka":
                continue
            options = {**dataset.load_options, **dataset.writer_options}
            topic = next(
                (
                    str(options[key])
                    for key in ("subscribe", "subscribePattern", "assign", "topic")
                    if key in options
                ),
                "a topic column",
            )
            servers = dataset.kafka_client_config.get("bootstrap.servers", "?")
            parts.append(f"'{dataset_name}' is Kafka {topic} at {servers}")
        return f" ({'; '.join(parts)})" if parts else ""

    def _dataset(self, name: str) -> SparkStreamingDataset | None:
        if self._catalog is None or name not in self._catalog:
            return None
        dataset = self._catalog[name]
        return dataset if isinstance(dataset, SparkStreamingDataset) else None

    def _install_signal_handlers(self) -> None:
        def request_stop(signum, frame):
            if self._stop_requested:
                raise KeyboardInterrupt
            logger.info(
                "Received %s: stopping streaming queries (repeat to force).",
                signal.Signals(signum).name,
            )
            self._stop_requested = True

        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous_handlers[signum] = signal.signal(signum, request_stop)
            except ValueError:  # not the main thread: leave signals alone
                return

    def _restore_signal_handlers(self) -> None:
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)
        self._previous_handlers = {}


def _nothing() -> None:
    pass


def observed_metrics(frame: Any) -> set[tuple[str, int]]:
    """The metrics ``frame``'s plan observes (``DataFrame.observe``), as
    (name, id of the observed DataFrame): two queries built from one node's
    output share them. Empty over Spark Connect, whose plan is the server's."""
    jdf = java_frame(frame)
    if jdf is None:
        return set()
    found, stack = set(), [jdf.queryExecution().logical()]
    while stack:
        node = stack.pop()
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
        if node.nodeName() == "CollectMetrics":
            found.add((node.name(), node.dataframeId()))
    return found


def describe_trigger(trigger: dict[str, Any]) -> str:
    """What a query's trigger means for the run, in words: the start line says
    it, so that a bounded run that keeps going (a `--params` lost) shows why."""
    kind, value = next(iter(trigger.items()))
    if kind == "availableNow":
        return "trigger availableNow, what is there and then it stops"
    if kind == "processingTime":
        return f"a micro-batch every {value}, until Ctrl-C or SIGTERM"
    if kind == "realTime":
        return f"Real-Time Mode, a checkpoint every {value}, until Ctrl-C or SIGTERM"
    return f"trigger {kind}={value}"
