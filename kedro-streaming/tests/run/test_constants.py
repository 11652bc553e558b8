"""A constant Spark cannot compute (a parameter's word where a number goes),
refused before any query starts, naming the parameter, instead of failing
at the query's first micro-batch."""

import pytest
from kedro.io import DataCatalog, MemoryDataset
from kedro.pipeline import node, pipeline
from kedro_streaming import StreamingConfigError
from kedro_streaming._checks.constants import check_constants, constant_failures
from kedro_streaming._checks.plans import Plans
from pyspark.sql import functions as F


@pytest.fixture
def readings(spark):
    return (
        spark.readStream.format("rate")
        .load()
        .withColumn("temperature_c", F.col("value").cast("double"))
    )


def too_hot(readings, alerts):
    return readings.filter(F.col("temperature_c") > F.lit(alerts["max"]))


def test_a_word_where_a_number_goes_is_refused_naming_its_parameter(spark, readings):
    frame = too_hot(readings, {"max": "thirty"})
    plans = Plans(frames={"alerts": frame})
    catalog = DataCatalog({"params:alerts": MemoryDataset({"max": "thirty"})})
    nodes = pipeline(
        [node(too_hot, ["readings", "params:alerts"], "alerts", name="too_hot")]
    )
    with pytest.raises(StreamingConfigError) as error:
        check_constants(spark, catalog, nodes, plans)
    assert str(error.value) == (
        "Streaming queries cannot start as the pipeline's nodes build them "
        "(`kedro streams validate` lists the same):\n"
        "  - query alerts (node too_hot): "
        "[CAST_INVALID_INPUT] The value 'thirty' of the type \"STRING\" cannot be "
        'cast to "DOUBLE" because it is malformed. Correct the value as per the '
        "syntax, or change its target type. Use `try_cast` to tolerate malformed "
        "input and return NULL instead. SQLSTATE: 22018 (the value of "
        "params:alerts.max). Fix: in conf/<env>/parameters*.yml, give "
        "params:alerts.max a value of the type Spark casts it to"
    )
    assert plans.frames == {}


def test_constants_spark_computes_are_no_problem(spark, readings):
    fine = (
        too_hot(readings, {"max": "30.5"})
        .withColumn("at", F.current_timestamp())
        .withColumn("day", F.to_date(F.lit("2026-11-26")))
        .withColumn("none", F.lit(None).cast("int"))
        # Spark does not fold a conditional branch's constant.
        .withColumn("ratio", F.expr("CASE WHEN temperature_c > 0 THEN 1 ELSE 1/0 END"))
        .withWatermark("timestamp", "10 seconds")
        .groupBy(F.window("timestamp", "1 minute"))
        .count()
    )
    assert constant_failures(spark, fine) == []
    # A division by zero, as ANSI mode refuses it.
    assert constant_failures(spark, readings.select(F.lit(1) / F.lit(0))) == [
        "[DIVIDE_BY_ZERO] Division by zero. Use `try_divide` to tolerate divisor "
        'being 0 and return NULL instead. If necessary set "spark.sql.ansi.enabled" '
        'to "false" to bypass this error. SQLSTATE: 22012'
    ]
