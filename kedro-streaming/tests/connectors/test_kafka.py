"""A Kafka entry's own problems, before any query starts."""

from kedro_streaming import (
    SparkStreamingDataset,
)
from pyspark.sql import functions as F


def test_a_kafka_sink_needs_a_topic_option_or_column(spark):
    sink_without_topic = SparkStreamingDataset(
        file_format="kafka", save_args={"checkpoint": "c"}
    )
    rows = spark.createDataFrame([("k", "v")], "key STRING, value STRING")
    assert sink_without_topic.data_problems(rows) == [
        "writes to Kafka without a topic: add `save_args: {topic: ...}`, or give "
        "each row its topic in a `topic` column"
    ]
    assert sink_without_topic.data_problems(rows.withColumn("topic", F.lit("t"))) == []
    # A struct value with a topic column: one record per topic, each a struct.
    routed = spark.sql(
        "SELECT 't' AS topic, named_struct('t', named_struct('n', 1), 'n', 2) AS value"
    )
    assert sink_without_topic.data_problems(routed) == [
        "names each row's topic in a `topic` column, so its `value` must hold one "
        "record (a struct) per topic, named after it; n is not a struct"
    ]
