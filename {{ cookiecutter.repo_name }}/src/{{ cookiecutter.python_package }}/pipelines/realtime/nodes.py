"""Realtime: checked trips out as Kafka messages, one per trip, as they come in."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def trip_messages(
    checked_trips: DataFrame, taxi_zones: DataFrame, trip_topics: dict[str, str]
) -> DataFrame:
    """One message per checked trip: valid trips to one topic, rejected ones
    (with their reasons and raw payload) to another.

    Each message carries every column of ``check_trips``' output, the origin
    of its input record (``kafka_topic``, ``kafka_partition``,
    ``kafka_offset``, ``kafka_timestamp``) included, and the borough and zone
    of both ends of the trip (null where the lookup has no such zone). Only
    stateless operations: it runs in Real-Time Mode as well as in
    micro-batches.

    Args:
        checked_trips: Output of ``check_trips``.
        taxi_zones: Zone lookup with ``LocationID``, ``Borough`` and ``Zone``.
        trip_topics: ``{valid: <topic>, rejected: <topic>}``.

    Returns:
        ``key`` (the pickup location ID), ``value`` (the trip as JSON) and
        ``topic``, as Spark's Kafka sink takes them.
    """
    zones = F.broadcast(taxi_zones.select("LocationID", "Borough", "Zone"))
    with_zones = checked_trips
    for end, id_column in (("pickup", "PULocationID"), ("dropoff", "DOLocationID")):
        with_zones = with_zones.join(
            zones.select(
                F.col("LocationID").alias(id_column),
                F.col("Borough").alias(f"{end}_borough"),
                F.col("Zone").alias(f"{end}_zone"),
            ),
            id_column,
            "left",
        )
    zone_columns = ["pickup_borough", "pickup_zone", "dropoff_borough", "dropoff_zone"]
    rejected = F.col("rejection_reason").isNotNull()
    return with_zones.select(
        F.col("PULocationID").cast("string").alias("key"),
        F.to_json(F.struct(*checked_trips.columns, *zone_columns)).alias("value"),
        F.when(rejected, F.lit(trip_topics["rejected"]))
        .otherwise(F.lit(trip_topics["valid"]))
        .alias("topic"),
    )
