"""Aggregate: bronze trips in; an hourly summary per pickup borough and the
quarantined records out."""

from __future__ import annotations

from typing import Any

from kedro_streaming import Lookup
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


def select_valid_trips(bronze_trips: DataFrame) -> DataFrame:
    """The trips of ``bronze_trips`` that passed every check of ``ingest``.

    Returns:
        The TLC fields and origin columns of the trips without a
        ``rejection_reason``.
    """
    return bronze_trips.filter(F.col("rejection_reason").isNull()).drop(
        "rejection_reason", "warnings", "raw_payload"
    )


def select_rejected_trips(bronze_trips: DataFrame) -> DataFrame:
    """The records of ``bronze_trips`` that ``ingest`` rejected: the quarantine.

    Returns:
        Every column of ``bronze_trips``, for the rows with a
        ``rejection_reason``: what was wrong, the raw payload and its origin.
    """
    return bronze_trips.filter(F.col("rejection_reason").isNotNull())


def summarise_hourly_by_borough(
    valid_trips: DataFrame, taxi_zones: DataFrame, summary: dict[str, Any]
) -> DataFrame:
    """Summarises trips per event-time window of dropoff time and pickup borough.

    On a stream, a window is emitted once the watermark (latest dropoff seen
    minus ``watermark_delay``) has passed its end; trips that arrive for a
    window already emitted are dropped by Spark and counted in the query's
    progress as rows dropped by the watermark.

    Args:
        valid_trips: Validated trips (``lpep_dropoff_datetime``,
            ``PULocationID``, ``passenger_count``, ``trip_distance``,
            ``fare_amount``, ``total_amount``).
        taxi_zones: Zone lookup (``LocationID``, ``Borough``); small, so it is
            read once and looked up by key (``kedro_streaming.Lookup``).
        summary: ``window_duration`` and ``watermark_delay``, e.g. "1 hour" and
            "10 minutes".

    Returns:
        One row per window and borough: ``window_start``, ``window_end``,
        ``pickup_borough``, ``trip_count``, ``avg_passengers``,
        ``total_distance``, ``avg_distance``, ``total_fare``, ``avg_fare``,
        ``total_amount``, ``avg_amount``.
    """
    # Small and static: looked up by key, read once, no join per micro-batch.
    zones = Lookup(taxi_zones.select("LocationID", "Borough"), key="LocationID")
    return summarise_hourly(
        valid_trips, zones.value("Borough", F.col("PULocationID")), summary
    )


def summarise_hourly(
    trips: DataFrame, borough: Column, summary: dict[str, Any]
) -> DataFrame:
    """The hourly summary of ``trips`` per ``borough`` (a zone missing from
    the zone table: "Unknown"), as ``summarise_hourly_by_borough`` returns it.
    """
    window = F.window("lpep_dropoff_datetime", summary["window_duration"])
    return (
        trips.withWatermark("lpep_dropoff_datetime", summary["watermark_delay"])
        # A zone missing from the lookup is reported as "Unknown" rather than
        # silently leaving the summary.
        .groupBy(window, F.coalesce(borough, F.lit("Unknown")).alias("b"))
        .agg(
            F.count(F.lit(1)).alias("trip_count"),
            F.avg("passenger_count").alias("avg_passengers"),
            F.sum("trip_distance").alias("total_distance"),
            F.avg("trip_distance").alias("avg_distance"),
            F.sum("fare_amount").alias("total_fare"),
            F.avg("fare_amount").alias("avg_fare"),
            F.sum("total_amount").alias("total_amount"),
            F.avg("total_amount").alias("avg_amount"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            F.col("b").alias("pickup_borough"),
            "trip_count",
            "avg_passengers",
            "total_distance",
            "avg_distance",
            "total_fare",
            "avg_fare",
            "total_amount",
            "avg_amount",
        )
    )
