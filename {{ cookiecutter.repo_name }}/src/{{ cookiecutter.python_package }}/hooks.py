"""The SparkSession and the life of the streaming queries of a `kedro run`.

Nodes only transform DataFrames; saving a streaming DataFrame starts a query
and returns at once. These hooks do the rest: build the session from
``spark.yml``, check the run's streaming configuration before any query
starts, hold back a stream that reads a sink written earlier in the same run
until that sink has history, keep the process alive while queries run, stop
them cleanly on Ctrl-C or SIGTERM, and turn a failed query into a failed run.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl
from kedro.io import DataCatalog
from kedro.pipeline import Pipeline
from py4j.protocol import Py4JJavaError
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from .datasets import ROWS_WRITTEN_METRIC, SparkStreamingDataset

logger = logging.getLogger(__name__)

TRIGGERS = ("processing_time", "available_now")
_KAFKA_CONNECTOR = re.compile(
    r"org\.apache\.spark:spark-sql-kafka-0-10_(?P<scala>[\d.]+):(?P<version>[^:,\s]+)"
)
_POLL_SECONDS = 0.5
# A node reports rows it sends to quarantine by observing a metric column of
# this name (see `DataFrame.observe`); each progress line shows it.
QUARANTINED_FIELD = "quarantined"


class StreamingConfigError(ValueError):
    """The run's streaming configuration cannot work; nothing was started."""


class StreamingQueryFailed(RuntimeError):
    """A streaming query of the run stopped with an error."""


class ProgressLog:
    """Logs one line per micro-batch of every query, and keeps running totals.

    The hooks call ``update`` while they wait on the queries. It reads each
    query's new progress reports as JSON: PySpark's ``StreamingQueryListener``
    converts every report field by field through py4j, which took about
    70 ms of CPU per report, a tenth of two cores for three queries at a
    1-second trigger. Only totals are kept, never per-batch history, so a long
    run does not grow the driver's memory.
    """

    def __init__(self) -> None:
        self.totals: dict[str, Counter] = {}
        self._last_seen: dict[str, tuple[str, int]] = {}

    def update(self, name: str, query: StreamingQuery) -> None:
        """Logs and counts the reports of ``query`` made since the last update."""
        seen = self._last_seen.get(name, ("", -1))
        unseen = []
        for report in _reports_newest_first(query):
            if (report["timestamp"], report["batchId"]) <= seen:
                break
            unseen.append(report)
        for report in reversed(unseen):
            self._log(name, report)
        if unseen:
            self._last_seen[name] = (unseen[0]["timestamp"], unseen[0]["batchId"])

    def _log(self, name: str, report: dict[str, Any]) -> None:
        states = report.get("stateOperators", [])
        metrics = report.get("observedMetrics", {})
        batch = {
            "batches": 1,
            "input_rows": report["numInputRows"],
            "rows_written": metrics.get(ROWS_WRITTEN_METRIC, {}).get("rows", 0),
            # Rows a node counted as quarantined (an observed `quarantined` metric).
            "quarantined": sum(row.get(QUARANTINED_FIELD, 0) for row in metrics.values()),
            "dropped_by_watermark": sum(
                state.get("numRowsDroppedByWatermark", 0) for state in states
            ),
        }
        logger.info(
            "Query %s batch %d: %d rows in, %d written, %d quarantined, %.1f rows/s, "
            "%d ms, watermark %s, %d state rows, %d dropped by watermark",
            name,
            report["batchId"],
            batch["input_rows"],
            batch["rows_written"],
            batch["quarantined"],
            report.get("processedRowsPerSecond", 0.0),
            report.get("batchDuration", 0),
            report.get("eventTime", {}).get("watermark", "none"),
            sum(state.get("numRowsTotal", 0) for state in states),
            batch["dropped_by_watermark"],
        )
        self.totals.setdefault(name, Counter()).update(batch)


def _reports_newest_first(query: StreamingQuery) -> Iterator[dict[str, Any]]:
    """The query's recent progress reports (Spark keeps 100), newest first."""
    jquery = getattr(query, "_jsq", None)
    if jquery is None:  # Spark Connect: the reports arrive as JSON already.
        for report in reversed(query.recentProgress):
            yield json.loads(report.json)
        return
    # Classic: fetched one by one, so that only the unseen ones cross py4j.
    reports = jquery.recentProgress()
    for index in range(len(reports) - 1, -1, -1):
        yield json.loads(reports[index].json())


class SparkHooks:
    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        """Builds the SparkSession from ``spark.yml``.

        The Kafka connector in ``spark.jars.packages`` is checked against the
        installed PySpark first, so a mismatch fails before Spark downloads it.
        """
        spark_conf = {key: str(value) for key, value in context.config_loader["spark"].items()}
        check_kafka_connector(spark_conf, pyspark.__version__, local_scala_version())

        builder = SparkSession.builder
        remote = spark_conf.pop("spark.remote", None)
        if remote:
            builder = builder.remote(remote)
        spark = builder.config(map=spark_conf).getOrCreate()
        if not remote:
            spark.sparkContext.setLogLevel("WARN")
        # On a cluster the running Spark may differ from the local PySpark.
        check_kafka_connector(spark_conf, spark.version, None)


class StreamingQueryHooks:
    """Checks, sequences, watches and stops the run's streaming queries."""

    def __init__(self) -> None:
        self._catalog: DataCatalog | None = None
        self._params: dict[str, Any] = {}
        self._queries: dict[str, StreamingQuery] = {}
        self._stop_requested = False
        self._previous_handlers: dict[int, Any] = {}
        self._progress = ProgressLog()

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        self._params = context.params

    @hook_impl
    def after_catalog_created(self, catalog: DataCatalog) -> None:
        self._catalog = catalog

    @hook_impl
    def before_pipeline_run(
        self, run_params: dict[str, Any], pipeline: Pipeline, catalog: DataCatalog
    ) -> None:
        """Fails on a configuration that cannot work, before any query starts."""
        self._catalog = catalog
        self._queries = {}
        self._stop_requested = False
        sinks = _streaming_datasets(catalog, pipeline.all_outputs())
        sources = _streaming_datasets(catalog, pipeline.inputs())
        trigger = run_trigger(self._params)

        problems = [
            f"'{name}' {problem}"
            for name, dataset in sinks.items()
            for problem in dataset.sink_problems()
        ]
        problems += [
            f"'{name}' {problem}"
            for name, dataset in sources.items()
            for problem in dataset.source_problems()
        ]
        shared = Counter(dataset.checkpoint for dataset in sinks.values())
        problems += [
            f"{', '.join(sorted(n for n, d in sinks.items() if d.checkpoint == path))} "
            f"share the checkpoint '{path}': give each sink its own"
            for path, count in shared.items()
            if path and count > 1
        ]
        if problems:
            raise StreamingConfigError(
                "Streaming configuration in conf/ cannot work:\n  - "
                + "\n  - ".join(problems)
            )
        timeout = float(self._params.get("kafka_connect_timeout", 30))
        spark = SparkSession.builder.getOrCreate()
        for name, dataset in {**sources, **sinks}.items():
            if dataset.file_format == "kafka":
                check_kafka_reachable(spark, name, dataset, timeout)

        for name, dataset in sinks.items():
            dataset.query_name = dataset.query_name or name
            if trigger is not None or dataset.trigger is None:
                dataset.trigger = trigger or {
                    "processingTime": str(self._params.get("trigger_interval", "10 seconds"))
                }
        self._progress = ProgressLog()
        self._install_signal_handlers()

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, data: Any, node: Any) -> None:
        dataset = self._dataset(dataset_name)
        if dataset is not None and dataset.query is not None:
            self._queries[dataset_name] = dataset.query
            logger.info(
                "Started streaming query '%s' (id %s).", dataset_name, dataset.query.id
            )

    @hook_impl
    def before_dataset_loaded(self, dataset_name: str, node: Any) -> None:
        """Holds back a stream over a sink this run writes until it has history."""
        query = self._queries.get(dataset_name)
        if query is None:
            return
        dataset = self._dataset(dataset_name)
        bounded = dataset is not None and "availableNow" in (dataset.trigger or {})
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
            self._restore_signal_handlers()

    @hook_impl
    def on_pipeline_error(self, error: Exception, run_params: dict[str, Any]) -> None:
        self._stop_all()
        self._restore_signal_handlers()

    def _log_totals(self) -> None:
        """The last progress lines, then one line of totals per query."""
        self._update_progress()
        for name in self._queries:
            totals = self._progress.totals.get(name, Counter())
            logger.info(
                "Query %s ended: %d batches, %d rows in, %d written, %d quarantined, "
                "%d dropped by watermark.",
                name,
                totals["batches"],
                totals["input_rows"],
                totals["rows_written"],
                totals["quarantined"],
                totals["dropped_by_watermark"],
            )

    def _update_progress(self) -> None:
        for name, query in self._queries.items():
            self._progress.update(name, query)

    def _wait(self, done) -> None:
        """Polls until ``done()``, a stop request or a failed query."""
        while True:
            self._update_progress()
            for name, query in self._queries.items():
                error = query.exception()
                if error is not None:
                    self._stop_all()
                    raise StreamingQueryFailed(
                        f"Streaming query '{name}' failed: {_headline(error)}\n"
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

    def _stop_all(self) -> None:
        for name, query in self._queries.items():
            if query.isActive:
                logger.info("Stopping streaming query '%s'.", name)
                query.stop()

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


def run_trigger(params: dict[str, Any]) -> dict[str, Any] | None:
    """The trigger that the run's ``trigger`` parameter forces on every sink.

    Returns:
        ``{"availableNow": True}`` for ``available_now``; ``None`` for
        ``processing_time``, which leaves each sink its own trigger or the
        ``trigger_interval`` default.
    """
    trigger = params.get("trigger", "processing_time")
    if trigger not in TRIGGERS:
        raise StreamingConfigError(
            f"Unknown trigger '{trigger}': run with `--params trigger=available_now` "
            "(process what is there, then stop) or `--params trigger=processing_time` "
            "(run until stopped)."
        )
    return {"availableNow": True} if trigger == "available_now" else None


def check_kafka_connector(
    spark_conf: dict[str, str], spark_version: str, scala_version: str | None
) -> None:
    """Fails unless the Kafka connector in ``spark.jars.packages`` fits this Spark."""
    packages = spark_conf.get("spark.jars.packages", "")
    for match in _KAFKA_CONNECTOR.finditer(packages):
        wrong_version = match["version"] != spark_version
        wrong_scala = scala_version is not None and match["scala"] != scala_version
        if wrong_version or wrong_scala:
            scala = scala_version or match["scala"]
            raise StreamingConfigError(
                f"spark.yml asks for the Kafka connector {match[0]}, but the running "
                f"Spark is {spark_version}"
                + (f" built for Scala {scala_version}" if scala_version else "")
                + ". Set spark.jars.packages in conf/base/spark.yml to "
                f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{spark_version}, "
                "or install the pyspark version the connector was built for."
            )


def check_kafka_reachable(
    spark: SparkSession, name: str, dataset: SparkStreamingDataset, timeout: float
) -> None:
    """Fails within ``timeout`` seconds unless the dataset's brokers accept it.

    The check connects with Spark's own Kafka client and the dataset's ``kafka.*``
    options (credentials included), as the query would. Without it, Spark
    retries an unreachable broker or a wrong password inside a running query
    for a long time.
    """
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: the brokers are the cluster's to reach.
        return
    config = dataset.kafka_client_config
    servers = config.get("bootstrap.servers", "")
    properties = jvm.java.util.Properties()
    for key, value in config.items():
        properties.put(key, value)
    for key in ("request.timeout.ms", "default.api.timeout.ms"):
        properties.put(key, str(int(timeout * 1000)))
    seconds = jvm.java.util.concurrent.TimeUnit.SECONDS
    admin = None
    try:
        admin = jvm.org.apache.kafka.clients.admin.Admin.create(properties)
        admin.describeCluster().nodes().get(int(timeout), seconds)
    except Py4JJavaError as error:
        cause = error.java_exception
        while cause.getCause() is not None:
            cause = cause.getCause()
        kind, detail = cause.getClass().getSimpleName(), cause.getMessage()
        if "Authentication" in kind:
            fix = (
                "refused the credentials: check the `kafka` entry of "
                "conf/local/credentials.yml (or the variables it reads)"
            )
        else:
            fix = (
                f"did not answer within {timeout:g} s: check that it runs and that "
                "kafka.bootstrap_servers in conf/<env>/globals.yml is right "
                "(`kafka_connect_timeout` sets the wait)"
            )
        raise StreamingConfigError(
            f"'{name}': the Kafka broker at {servers} {fix}. ({kind}: {detail})"
        ) from None
    finally:
        if admin is not None:
            admin.close(jvm.java.time.Duration.ofSeconds(1))


def local_scala_version() -> str | None:
    """The Scala binary version of the Spark jars bundled with PySpark, e.g. 2.13."""
    jars = Path(pyspark.__file__).parent / "jars"
    for jar in jars.glob("scala-library-*.jar"):
        found = re.match(r"scala-library-(\d+\.\d+)", jar.name)
        if found:
            return found[1]
    return None


def _headline(error: Exception, limit: int = 1000) -> str:
    """The first line of Spark's message, without the query plan that follows."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    headline = lines[0] if lines else type(error).__name__
    return headline if len(headline) <= limit else headline[:limit] + "..."


def _streaming_datasets(
    catalog: DataCatalog, names: set[str]
) -> dict[str, SparkStreamingDataset]:
    datasets = {}
    for name in sorted(names):
        if name in catalog:
            dataset = catalog[name]
            if isinstance(dataset, SparkStreamingDataset):
                datasets[name] = dataset
    return datasets
