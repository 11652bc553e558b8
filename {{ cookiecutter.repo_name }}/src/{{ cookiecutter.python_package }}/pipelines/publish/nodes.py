"""Publish: summary rows out as messages, for a Kafka sink."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def summary_messages(hourly_borough_summary: DataFrame) -> DataFrame:
    """One message per summary row, as the summary table commits it.

    Reads the table ``aggregate`` writes rather than aggregating again, so a
    run with Kafka output does the aggregation once.

    Returns:
        ``key``: the pickup borough; ``value``: the summary row, as a record
        the sink encodes (JSON, or Avro with the catalog's ``avro`` option).
    """
    return hourly_borough_summary.select(
        F.col("pickup_borough").alias("key"),
        F.struct(*hourly_borough_summary.columns).alias("value"),
    )
