"""transformWithState: found in a plan before start, and run by the harness
with processing-time timers and a time to live."""

import threading
import time
from datetime import datetime

import pytest
from kedro_streaming._checks.stateful import (
    PROVIDER,
    missing_api_problem,
    redefined_watermark_problem,
    transform_with_state_problem,
    unwatermarked_join_note,
)
from kedro_streaming._observe.metrics import unix_time
from kedro_streaming.testing._steps import collector
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


class Quiet(StatefulProcessor):
    """Per key: its events until none has come for a second, then a row; that
    it was seen is remembered for 30 seconds (a time to live)."""

    def init(self, handle) -> None:
        self.handle = handle
        self.count = handle.getValueState("count", "events BIGINT")
        self.seen = handle.getValueState("seen", "seen BOOLEAN", 30_000)

    def handleInputRows(self, key, rows, timerValues):
        events = sum(1 for _ in rows)
        total = (self.count.get()[0] if self.count.exists() else 0) + events
        self.count.update((total,))
        self.seen.update((True,))
        for timer in self.handle.listTimers():
            self.handle.deleteTimer(timer)
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 1000)
        return iter([])

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        (events,) = self.count.get()
        self.count.clear()
        yield Row(key=key[0], events=events)


def quiet_keys(events: DataFrame) -> DataFrame:
    return events.groupBy("key").transformWithState(
        Quiet(), "key STRING, events BIGINT", "Append", "ProcessingTime"
    )


def values(state: list[dict]) -> dict:
    """A processor's value state: each key and its one value."""
    return {
        row["key.key"]: next(v for k, v in row.items() if k.startswith("value."))
        for row in state
    }


def test_processing_time_timers_fire_and_values_expire_step_by_step(
    stream_test, caplog
):
    quiet = stream_test(quiet_keys, streams={"events": "key STRING"})
    first = quiet.step(events=[("a",), ("a",), ("b",)])
    # Processing time is the system's clock: past the timers, which the query,
    # running on, fires before the next step takes that batch. The state is
    # the step's all the same, variable by variable, read from the checkpoint;
    # a timer's time is the batch's clock plus a second (not known ahead).
    time.sleep(1.5)
    assert values(quiet.state(part="count")) == {"a": 2, "b": 1}
    assert values(quiet.state(part="seen")) == {"a": True, "b": True}
    assert sorted(row["key.key"] for row in quiet.state(timers=True)) == ["a", "b"]
    fired = quiet.step()
    assert values(quiet.state(part="count")) == {}
    assert quiet.state(timers=True) == []
    assert values(quiet.state(part="seen")) == {"a": True, "b": True}
    # Past the time to live, counted from the start of the batch that read
    # the events. That first batch alone took 9.8 s on 2 cores (Spark
    # starting its Python worker and state store; 10 s failed the test),
    # hence 30 s, so that the values outlast the steps before.
    began = next(unix_time(r["timestamp"]) for r in first.progress if r["numInputRows"])
    time.sleep(max(0.0, began + 30.5 - time.time()))
    expired = quiet.step()

    assert values(quiet.state(part="seen")) == {}
    assert [first.rows, fired.rows, expired.rows] == [
        [],
        [("a", 2), ("b", 1)],
        [],
    ]
    figures = [
        [
            (op.rows, op.timers_set, op.timers_removed, op.ttl_values_removed)
            for op in step.operators
        ]
        for step in (first, fired, expired)
    ]
    # A Python processor's fired timers count as removed (Spark reports them
    # as deleted); the counts go when they fire, what was seen when its time
    # to live runs out.
    assert figures == [[(4, 2, 0, 0)], [(2, 0, 2, 0)], [(0, 0, 0, 2)]]
    # Stopped between two batches, not in one: nothing for py4j to report.
    assert "Python Proxy" not in caplog.text


def test_a_batch_given_again_before_a_step_took_it_is_collected_once(spark):
    """Stopped after its rows were collected and before its commit, a batch
    runs again at the next start with the same id."""
    batches, done = [], threading.Event()
    collect = collector(batches, done)
    collect(spark.createDataFrame([("b",), ("a",)], "key STRING"), 3)
    collect(spark.createDataFrame([("a",), ("b",)], "key STRING"), 3)
    collect(spark.createDataFrame([("c",)], "key STRING"), 4)
    assert batches == [(3, [("a",), ("b",)]), (4, [("c",)])]
    assert done.is_set()


@pytest.mark.parametrize(
    ("provider", "bounded", "refusal"),
    [
        pytest.param(None, False, None, id="continuous on RocksDB"),
        pytest.param(None, True, "the query would never end", id="available_now"),
        pytest.param(HDFS, False, "keeps its state in RocksDB only", id="HDFS store"),
    ],
)
def test_transform_with_state_is_refused_before_start_where_it_cannot_run(
    spark, tmp_path, provider, bounded, refusal
):
    events = spark.readStream.schema("key STRING").parquet(str(tmp_path))
    shipped = spark.conf.get(PROVIDER)
    if provider:
        spark.conf.set(PROVIDER, provider)
    try:
        problem = transform_with_state_problem(
            spark, quiet_keys(events), bounded=bounded
        )
    finally:
        spark.conf.set(PROVIDER, shipped)
    assert (problem is None) if refusal is None else (refusal in problem)
    # A query without it is not looked at.
    assert transform_with_state_problem(spark, events, bounded=True) is None


def test_a_spark_line_without_the_row_api_is_named(spark):
    grouped = spark.createDataFrame(
        [("a", datetime(2024, 3, 1))], "key STRING, at TIMESTAMP"
    )
    with pytest.raises(AttributeError) as raised:
        grouped.groupBy("key").transformWithStateInRows  # noqa: B018 (as on Spark 4.0)
    problem = missing_api_problem(raised.value, "4.0.0")
    assert "Spark 4.0.0 has no such method" in problem
    assert "transformWithStateInPandas" in problem
    assert missing_api_problem(ValueError("other"), "4.0.0") is None


@pytest.mark.parametrize(
    ("watermarked", "unwatermarked"),
    [
        pytest.param(("trips", "payments"), [], id="both sides"),
        pytest.param(("trips",), ["payments"], id="one side"),
        pytest.param((), ["trips", "payments"], id="neither side"),
    ],
)
def test_a_join_of_two_streams_that_keeps_a_side_for_ever_is_noted(
    spark, tmp_path, watermarked, unwatermarked
):
    def stream(name: str) -> DataFrame:
        (tmp_path / name).mkdir()
        frame = spark.readStream.schema(f"id INT, {name}_at TIMESTAMP").parquet(
            str(tmp_path / name)
        )
        if name in watermarked:
            frame = frame.withWatermark(f"{name}_at", "10 minutes")
        return frame

    zones = spark.createDataFrame([(1, "Queens")], "id INT, borough STRING")
    trips, payments = stream("trips"), stream("payments")
    joined = trips.join(
        payments,
        (trips.id == payments.id)
        & payments.payments_at.between(
            trips.trips_at, trips.trips_at + F.expr("INTERVAL 15 MINUTES")
        ),
    ).join(zones, trips.id == zones.id)  # a stream-static join keeps no state

    note = unwatermarked_join_note(joined)
    sides = [f"FileSource[{tmp_path / name}]" for name in unwatermarked]
    if not sides:
        assert note is None
        return
    which = (
        f"its side reading {sides[0]} has no watermark"
        if len(sides) == 1
        else f"its sides reading {sides[0]} and {sides[1]} have no watermark"
    )
    assert note == (
        f"joins two streams, and {which}: Spark then evicts no row of either side "
        "from the join's state, which grows without bound (the "
        "KedroStreamStateGrowing alert fires after an hour of it). Give each side "
        "withWatermark, and the join a time bound on both sides' event times "
        "(docs/stateful.md)"
    )


@pytest.mark.parametrize(
    ("build", "problem"),
    [
        pytest.param(
            lambda a, b: a.withWatermark("at", "1 minute").withWatermark(
                "at", "5 minutes"
            ),
            "sets a watermark on `at` over a stream that already has one (on `at`): "
            "Spark refuses to redefine a watermark, at the query's first batch. Keep "
            "one withWatermark per stream, where the node reads it; over a table that "
            "a stream with a watermark wrote, the mark is its writer's: read the table "
            "without it (no `keep_watermark: true` in the source's load_args) and set "
            "this query's own (docs/stateful.md)",
            id="twice on one stream",
        ),
        pytest.param(
            lambda a, b: (
                a.withWatermark("at", "1 minute")
                .groupBy(F.window("at", "10 minutes"))
                .count()
            ),
            None,
            id="once",
        ),
        pytest.param(
            lambda a, b: a.withWatermark("at", "1 minute").join(
                b.withWatermark("bt", "1 minute"), "id"
            ),
            None,
            id="once per side of a join",
        ),
    ],
)
def test_a_watermark_set_twice_on_a_stream_is_refused_before_start(
    spark, tmp_path, build, problem
):
    a, b = (
        spark.readStream.schema(f"id INT, {t} TIMESTAMP").parquet(str(tmp_path))
        for t in ("at", "bt")
    )
    assert redefined_watermark_problem(spark, build(a, b)) == problem
