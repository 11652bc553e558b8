"""Realtime: checked trips out as Kafka messages, one per trip, as they come in."""

from __future__ import annotations

from kedro_streaming import Lookup
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from {{ cookiecutter.python_package }}.pipelines.ingest.nodes import SOURCE_COLUMNS

# Kafka takes messages of about 1 MB (the producer's max.request.size and the
# broker's message.max.bytes): a rejected message carries the first this many
# characters of its raw payload; the whole record stays in the input topic at
# its kafka_offset.
RAW_PAYLOAD_CHARACTERS = 100_000


def trip_messages(
    checked_trips: DataFrame, taxi_zones: DataFrame, trip_topics: dict[str, str]
) -> DataFrame:
    """One message per checked trip: valid trips to one topic, rejected ones
    to another.

    A valid trip's message carries every column of ``check_trips``' output
    and the borough and zone of both ends of the trip. A rejected one carries
    its ``rejection_reason``, ``warnings`` and ``raw_payload`` (the first
    ``RAW_PAYLOAD_CHARACTERS``; ``raw_payload_truncated`` says whether that is
    all of it), not its fields, which can be anything. Both carry the origin
    of their input record (``kafka_topic``, ``kafka_partition``,
    ``kafka_offset``, ``kafka_timestamp``). Only stateless operations: it runs
    in Real-Time Mode as well as in micro-batches.

    Args:
        checked_trips: Output of ``check_trips``.
        taxi_zones: Zone lookup with ``LocationID``, ``Borough`` and ``Zone``.
        trip_topics: ``{valid: <topic>, rejected: <topic>}``.

    Returns:
        ``key`` (the pickup location ID), ``topic``, and ``value``: a record
        per topic, named after it, the row's own set (the sink encodes it).
    """
    zones = Lookup(taxi_zones.select("LocationID", "Borough", "Zone"), "LocationID")
    zone_columns = [
        zones.value(column, F.col(id_column)).alias(f"{end}_{column.lower()}")
        for end, id_column in (("pickup", "PULocationID"), ("dropoff", "DOLocationID"))
        for column in ("Borough", "Zone")
    ]
    rejected = F.col("rejection_reason").isNotNull()
    payload = F.col("raw_payload")
    rejected_record = F.struct(
        "rejection_reason",
        "warnings",
        F.substring(payload, 1, RAW_PAYLOAD_CHARACTERS).alias("raw_payload"),
        F.coalesce(F.length(payload) > RAW_PAYLOAD_CHARACTERS, F.lit(False)).alias(
            "raw_payload_truncated"
        ),
        *[c for c in SOURCE_COLUMNS if c != "source_file"],
    )
    valid_record = F.struct(*checked_trips.columns, *zone_columns)
    return checked_trips.select(
        F.col("PULocationID").cast("string").alias("key"),
        # One record per topic: the sink encodes each row's own (JSON, or
        # Avro with the catalog's `avro` option).
        F.struct(
            F.when(~rejected, valid_record).alias(trip_topics["valid"]),
            F.when(rejected, rejected_record).alias(trip_topics["rejected"]),
        ).alias("value"),
        F.when(rejected, F.lit(trip_topics["rejected"]))
        .otherwise(F.lit(trip_topics["valid"]))
        .alias("topic"),
    )
