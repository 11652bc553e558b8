"""Real-Time Mode: refused before start where it cannot run, and quiet when
stopped."""

import threading
import time
from types import SimpleNamespace

import pytest
from kedro_streaming import (
    SparkStreamingDataset,
    StreamingConfigError,
)
from kedro_streaming._checks.realtime import (
    INTERRUPTED_TASK_LOGGERS,
    check_real_time,
    check_real_time_intervals,
    check_real_time_task_slots,
    quiet_interrupted_tasks,
    real_time_plan_problem,
    running_tasks,
)
from kedro_streaming._spark import jvm_of
from pyspark.sql import functions as F


def test_real_time_mode_needs_a_core_per_kafka_partition(spark):
    """A partition beyond a local Spark's cores would never be read, silently:
    refused before start (here local[2])."""
    out = SparkStreamingDataset(
        file_format="kafka",
        save_args={"checkpoint": "c", "trigger": {"realTime": "1 minute"}},
    )

    def source(**load_args):
        return SparkStreamingDataset(file_format="kafka", load_args=load_args)

    def check(dataset):
        check_real_time_task_slots(spark, {"out": out}, lambda _: {"in": dataset})

    check(source(assign='{"trips": [0, 1]}'))
    check(source(subscribePattern="trips.*"))  # partitions unknown before start
    for too_many in (
        source(assign='{"trips": [0, 1], "other": [0]}'),
        source(assign='{"trips": [0]}', minPartitions="3"),
    ):
        with pytest.raises(StreamingConfigError, match=r"source 'in' \(3\)") as error:
            check(too_many)
        assert "Spark has 2 cores: 1 partition(s) would never be read" in str(
            error.value
        )


def test_real_time_mode_is_refused_where_it_cannot_run(spark):
    """Spark 4.0 has no Real-Time Mode, a bounded run cannot end one, and it
    reads Kafka only, each record as it comes."""
    out = SparkStreamingDataset(
        file_format="kafka",
        save_args={"checkpoint": "c", "trigger": {"realTime": "1 minute"}},
    )
    assert out.real_time
    files = SparkStreamingDataset(filepath="in", file_format="json")
    limited = SparkStreamingDataset(
        file_format="kafka", load_args={"maxOffsetsPerTrigger": 100}
    )
    kafka_source = SparkStreamingDataset(file_format="kafka", load_args={})

    def refusal(version, sources, bounded=False):
        with pytest.raises(StreamingConfigError) as error:
            check_real_time(version, {"out": out}, lambda _: sources, bounded=bounded)
        return str(error.value)

    assert "Spark 4.0.2 does not have: it came with Spark 4.1" in refusal(
        "4.0.2", {"in": kafka_source}
    )
    assert "without `--params trigger=available_now`" in refusal(
        "4.2.0", {"in": kafka_source}, bounded=True
    )
    assert "reads Kafka only, but its query reads 'in' (json)" in refusal(
        "4.1.1", {"in": files}
    )
    assert "its source 'in' sets maxOffsetsPerTrigger, which" in refusal(
        "4.3.0", {"in": limited}
    )
    delayed = SparkStreamingDataset(
        file_format="kafka",
        load_args={"minOffsetsPerTrigger": 10, "maxTriggerDelay": "5m"},
    )
    assert "sets minOffsetsPerTrigger and maxTriggerDelay, which Spark" in refusal(
        "4.2.0", {"in": delayed}
    )
    # Spark's least interval (5 s by default), checked before the query
    # starts; Spark would fail the started query.
    hasty = SparkStreamingDataset(
        file_format="kafka",
        save_args={"checkpoint": "c", "trigger": {"realTime": "2 seconds"}},
    )
    with pytest.raises(StreamingConfigError) as error:
        check_real_time_intervals(spark, {"hasty": hasty, "out": out})
    assert str(error.value) == (
        "Real-Time Mode cannot run here:\n  - 'hasty' would checkpoint every 2 "
        "seconds, more often than Spark allows in Real-Time Mode "
        "(spark.sql.streaming.realTimeMode.minBatchDuration: 5 s): give its "
        "realTime trigger 5 seconds or more, in the catalog or in the --params "
        "that sets it"
    )
    for version in ("4.1.1", "4.2.0", "4.3.0"):
        check_real_time(
            version, {"out": out}, lambda _: {"in": kafka_source}, bounded=False
        )

    # Stateful operators: none before Spark 4.3, aggregations and
    # dropDuplicates from 4.3 on. A join with a static table keeps no state.
    stream = spark.readStream.format("rate").load()
    static = spark.range(3).withColumnRenamed("id", "value")
    stateless = stream.join(static, "value", "left").select("value", "timestamp")
    windows = (
        stream.withWatermark("timestamp", "1 minute")
        .groupBy(F.window("timestamp", "1 minute"))
        .count()
    )
    deduplicated = stream.dropDuplicates(["value"])
    for version in ("4.1.1", "4.2.0", "4.3.0"):
        assert real_time_plan_problem(stateless, version) is None
    for frame, operator in ((windows, "Aggregate"), (deduplicated, "Deduplicate")):
        problem = real_time_plan_problem(frame, "4.2.0")
        assert (
            f"Spark 4.2.0 does not run the stateful operation(s) {operator}" in problem
        )
        assert real_time_plan_problem(frame, "4.3.0") is None


def test_the_errors_of_interrupted_tasks_are_off_until_their_tasks_end(spark):
    """A requested stop of a Real-Time Mode query interrupts its tasks, which
    log their aborted writes as they end, after the stop returns: Spark's
    loggers of them stay off until the run's end puts them back, once no task
    runs (here two tasks, cancelled while they sleep)."""
    log4j = jvm_of(spark).org.apache.logging.log4j
    context = spark.sparkContext

    def levels():
        return [
            str(log4j.LogManager.getLogger(name).getLevel())
            for name in INTERRUPTED_TASK_LOGGERS
        ]

    def sleep_in_tasks() -> None:
        context.setJobGroup("interrupted", "tasks to interrupt", True)
        with pytest.raises(Exception, match="cancel"):
            context.parallelize([0, 1], 2).foreach(lambda _: time.sleep(30))

    before = levels()
    job = threading.Thread(target=sleep_in_tasks)
    job.start()
    deadline = time.monotonic() + 60
    while running_tasks(spark) < 2:
        assert time.monotonic() < deadline, "the two tasks never ran"
        time.sleep(0.05)
    put_back = quiet_interrupted_tasks(spark)
    assert levels() == ["OFF"] * len(INTERRUPTED_TASK_LOGGERS)
    context.cancelJobGroup("interrupted")
    put_back()
    assert (running_tasks(spark), levels()) == (0, before)
    job.join(timeout=60)
    quiet_interrupted_tasks(SimpleNamespace())()  # Spark Connect: nothing to do
