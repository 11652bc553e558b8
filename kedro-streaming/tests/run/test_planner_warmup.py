"""The planner warmed up while a Real-Time Mode query reads its first batch."""

import logging
import time

import pytest
from kedro_streaming import StreamingConfigError
from kedro_streaming._checks.planner_warmup import PlannerWarmUp, planner_warm_up
from pyspark.sql import functions as F


def test_the_warm_up_plans_the_running_query_and_stops_with_it(spark, caplog):
    """Each planning is the query's own plan to generated code, with a gap
    between two, before nine tenths of the interval; stopping ends it at
    once."""
    frame = (
        spark.readStream.format("rate")
        .load()
        .withColumn("doubled", F.col("value") * 2)
        .where("doubled % 3 = 1")
    )
    query = frame.writeStream.format("noop").start()
    codegen = spark._jvm.org.apache.spark.sql.execution.WholeStageCodegenExec
    try:
        generated = codegen.codeGenTime()
        caplog.set_level(logging.INFO, logger="kedro_streaming.queries")
        warm_up = PlannerWarmUp(frame, interval_s=60.0, times=3, after=0.0, gap=0.5)
        began = time.monotonic()
        warm_up.start()
        warm_up._thread.join(timeout=60)
        took = time.monotonic() - began
        assert "3 plannings" in caplog.text
        assert codegen.codeGenTime() > generated  # its code was generated
        # Each planning's own time varies with the JIT and the machine: only
        # the two 0.5 s gaps between the three are certain.
        assert took >= 1.0

        caplog.clear()
        stopped = PlannerWarmUp(frame, interval_s=600.0, times=100, after=0.0)
        stopped.start()
        stopped.stop()
        assert not stopped._thread.is_alive()
        assert "100 plannings" not in caplog.text
    finally:
        query.stop()


@pytest.mark.parametrize(
    ("value", "times"),
    [("25", 25), (0, 0), ("-1", None), ("many", None), ("2.5", None)],
    ids=["number", "none", "negative", "a word", "a fraction"],
)
def test_the_warm_up_setting_is_a_whole_number(value, times):
    settings = {"realtime_planner_warm_up": value}
    if times is None:
        with pytest.raises(StreamingConfigError, match="not a number of plannings"):
            planner_warm_up(settings)
    else:
        assert planner_warm_up(settings) == times
