"""Real-Time Mode (Spark 4.1+): what a run in it needs from the Spark line,
its sources, its trigger and its cores, checked before any query starts."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from kedro_streaming._connectors.kafka.checks import BATCH_SIZE_OPTIONS, source_tasks
from kedro_streaming._dataset import SparkStreamingDataset
from kedro_streaming._spark import java_frame, jvm_of, plan_nodes
from kedro_streaming.errors import StreamingConfigError

# The first Spark with Real-Time Mode, and the first whose Real-Time Mode runs
# stateful operators (streaming aggregations, dropDuplicates).
REAL_TIME_SPARK = (4, 1)
STATEFUL_REAL_TIME_SPARK = (4, 3)

# Spark's loggers that report, at ERROR, the tasks a requested stop interrupts
# in Real-Time Mode: about 100 lines, though nothing is lost (the interval not
# yet checkpointed is written again at the next start).
INTERRUPTED_TASK_LOGGERS = (
    "org.apache.spark.util.Utils",
    "org.apache.spark.sql.execution.datasources.v2.DataWritingSparkTask",
    "org.apache.spark.sql.execution.datasources.v2.WriteToDataSourceV2Exec",
    "org.apache.spark.scheduler.DAGScheduler",
)


def quiet_interrupted_tasks(spark: SparkSession) -> Callable[[], None]:
    """Turns ``INTERRUPTED_TASK_LOGGERS`` off until the returned call puts
    their levels back (nothing to do on Spark Connect)."""
    jvm = jvm_of(spark)
    if jvm is None:
        return lambda: None
    log4j = jvm.org.apache.logging.log4j
    levels = {
        name: log4j.LogManager.getLogger(name).getLevel()
        for name in INTERRUPTED_TASK_LOGGERS
    }
    for name in levels:
        log4j.core.config.Configurator.setLevel(name, log4j.Level.OFF)

    def put_back() -> None:
        # A stopped query's tasks end after `stop()` returns, each logging
        # its aborted commit as it goes: the levels come back once they have.
        deadline = time.monotonic() + INTERRUPTED_TASKS_END_SECONDS
        try:
            while running_tasks(spark) and time.monotonic() < deadline:
                time.sleep(0.1)
        except Exception:  # noqa: BLE001 (the wait is best effort; the levels come back)
            pass
        for name, level in levels.items():
            log4j.core.config.Configurator.setLevel(name, level)

    return put_back


# How long the run's end waits for a stopped query's tasks before it puts the
# loggers back (an interrupted task ends in well under a second).
INTERRUPTED_TASKS_END_SECONDS = 30.0


def running_tasks(spark: SparkSession) -> int:
    """The tasks running now in the driver's own executor (``local[...]``), else
    0: its pool's active threads, exact, unlike the status tracker's count."""
    executor = jvm_of(spark).org.apache.spark.executor.Executor
    source = executor.executorSourceLocalModeOnly()
    if source is None:
        return 0
    return source.metricRegistry().getGauges().get("threadpool.activeTasks").getValue()


def check_real_time(
    spark_version: str,
    sinks: dict[str, SparkStreamingDataset],
    sources_of,
    *,
    bounded: bool,
) -> None:
    """Fails unless the run's Real-Time Mode ``sinks`` can run on this Spark.
    ``sources_of``: a sink's name -> the streaming datasets its query reads."""
    problems = []
    for name, dataset in sinks.items():
        if spark_tuple(spark_version) < REAL_TIME_SPARK:
            problems.append(
                f"'{name}' runs in Real-Time Mode, which Spark {spark_version} does "
                "not have: it came with Spark 4.1. Make the project for Spark 4.1 "
                "or later (spark_version in `kedro new --config`, or pyspark and "
                "the packages of spark.yml by hand), or give it a processingTime "
                "trigger in the catalog"
            )
        if bounded:
            problems.append(
                f"'{name}' runs in Real-Time Mode, whose queries run until stopped: "
                "run it without `--params trigger=available_now` (Ctrl-C or SIGTERM "
                "stops it cleanly)"
            )
        for source, source_dataset in sources_of(name).items():
            if not source_dataset.connector.real_time:
                problems.append(
                    f"'{name}' runs in Real-Time Mode, which reads Kafka only, but "
                    f"its query reads '{source}' ({source_dataset.file_format}): run "
                    "it on a Kafka source, or give it a processingTime trigger"
                )
            elif limits := [
                option
                for option in BATCH_SIZE_OPTIONS
                if option in source_dataset.load_options
            ]:
                problems.append(
                    f"'{name}' runs in Real-Time Mode, which reads each record as it "
                    f"comes: its source '{source}' sets {' and '.join(limits)}, "
                    "which Spark refuses then; read the topic through a catalog "
                    "entry of its own without " + ("them" if len(limits) > 1 else "it")
                )
    _refuse_real_time(problems)


def check_real_time_intervals(
    spark: SparkSession, sinks: dict[str, SparkStreamingDataset]
) -> None:
    """Fails when a Real-Time Mode sink checkpoints more often than Spark allows
    (``minBatchDuration``): Spark would fail it once started."""
    jvm = jvm_of(spark)
    if jvm is None:  # Spark Connect: the server checks
        return
    setting = "spark.sql.streaming.realTimeMode.minBatchDuration"
    problems = []
    for name, dataset in sinks.items():
        interval = (dataset.trigger or {}).get("realTime")
        if not isinstance(interval, str):
            continue
        try:
            every = interval_ms(jvm, interval)
            least = jvm.org.apache.spark.network.util.JavaUtils.timeStringAsMs(
                spark.conf.get(setting, "5s")
            )
        except Exception:  # noqa: BLE001 (check_options names an unreadable one)
            continue
        if every < least:
            problems.append(
                f"'{name}' would checkpoint every {interval}, more often than Spark "
                f"allows in Real-Time Mode ({setting}: {least / 1000:g} s): give "
                f"its realTime trigger {least / 1000:g} seconds or more, in the "
                "catalog or in the --params that sets it"
            )
    _refuse_real_time(problems)


def interval_ms(jvm: Any, interval: str) -> int:
    """An interval as Spark reads a trigger's (``"2 minutes"``), in ms."""
    return jvm.org.apache.spark.sql.streaming.Trigger.ProcessingTime(
        interval
    ).intervalMs()


def _refuse_real_time(problems: list[str]) -> None:
    if problems:
        raise StreamingConfigError(
            "Real-Time Mode cannot run here:\n  - " + "\n  - ".join(problems)
        )


def check_real_time_task_slots(
    spark: SparkSession, sinks: dict[str, SparkStreamingDataset], sources_of
) -> None:
    """Fails when a Real-Time Mode query would hold more tasks (one per Kafka
    partition) than a local Spark has cores: a partition without one is never
    read, without an error. A cluster's cores are not known before start."""
    slots = _local_cores(spark.conf.get("spark.master", ""))
    if slots is None:
        return
    problems = []
    for name in sinks:
        for source, dataset in sources_of(name).items():
            tasks = source_tasks(dataset)
            if tasks is not None and tasks > slots:
                problems.append(
                    f"'{name}' runs in Real-Time Mode, which holds a task per "
                    f"partition of its Kafka source '{source}' ({tasks}) for as long "
                    f"as it runs, but Spark has {slots} cores: {tasks - slots} "
                    f"partition(s) would never be read. Give Spark at least {tasks} "
                    "cores (spark.master in spark.yml), or read a topic with at "
                    f"most {slots} partitions"
                )
    _refuse_real_time(problems)


def _local_cores(master: str) -> int | None:
    """The cores of a local master (``local``, ``local[4]``, ``local[*]``)."""
    if master == "local":
        return 1
    found = re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", master)
    if not found:
        return None
    return (os.cpu_count() or 1) if found[1] == "*" else int(found[1])


# Logical plan nodes that keep state across micro-batches, and the first
# Spark whose Real-Time Mode runs them (None: none yet).
_STATEFUL_NODES = {
    "Aggregate": STATEFUL_REAL_TIME_SPARK,
    "Deduplicate": STATEFUL_REAL_TIME_SPARK,
    "DeduplicateWithinWatermark": None,
    "FlatMapGroupsWithState": None,
    "FlatMapGroupsInPandasWithState": None,
    "TransformWithState": None,
    "TransformWithStateInPySpark": None,
    "TransformWithStateInPandas": None,
    "Join": None,  # between two streams; with a static table it keeps no state
}


def real_time_plan_problem(frame: Any, spark_version: str) -> str | None:
    """The stateful operators of ``frame``'s plan that Real-Time Mode in this
    Spark cannot run (Spark refuses them only once the query runs)."""
    jdf = java_frame(frame)
    if jdf is None:
        return None
    refused = set()
    for node in plan_nodes(jdf.queryExecution().analyzed()):
        name = node.nodeName()
        if name not in _STATEFUL_NODES or not node.isStreaming():
            continue
        kids = node.children()
        if name == "Join" and not all(
            kids.apply(i).isStreaming() for i in range(kids.size())
        ):
            continue
        since = _STATEFUL_NODES[name]
        if since is None or spark_tuple(spark_version) < since:
            refused.add(name)
    if not refused:
        return None
    return (
        f"Real-Time Mode in Spark {spark_version} does not run the stateful "
        f"operation(s) {', '.join(sorted(refused))} (streaming aggregations and "
        "dropDuplicates come with Spark 4.3): give the sink a processingTime "
        "trigger, or keep the query stateless"
    )


def spark_tuple(version: str) -> tuple[int, int]:
    """A Spark version's line as numbers: ``4.1.1`` -> ``(4, 1)``."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)
