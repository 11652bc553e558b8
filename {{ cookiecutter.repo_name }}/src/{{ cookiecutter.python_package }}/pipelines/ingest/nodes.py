"""Ingest: raw trip records in, typed and validated trips out.

Every function takes and returns DataFrames and works the same on batch and
streaming input. Nothing is dropped: every record read becomes one row of
``bronze_trips``, a valid trip or a rejected one with its reasons.
"""

from __future__ import annotations

from typing import Any

from kedro_streaming import (
    PROVENANCE_COLUMNS,
    Lookup,
    check_expectations,
    parse_records,
    record_origin,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

# The NYC TLC green-taxi trip record, field by field, with its Spark type.
TRIP_COLUMNS: dict[str, str] = {
    "VendorID": "int",
    "lpep_pickup_datetime": "timestamp",
    "lpep_dropoff_datetime": "timestamp",
    "store_and_fwd_flag": "string",
    "RatecodeID": "int",
    "PULocationID": "int",
    "DOLocationID": "int",
    "passenger_count": "int",
    "trip_distance": "double",
    "fare_amount": "double",
    "extra": "double",
    "mta_tax": "double",
    "tip_amount": "double",
    "tolls_amount": "double",
    "ehail_fee": "double",
    "improvement_surcharge": "double",
    "total_amount": "double",
    "payment_type": "int",
    "trip_type": "int",
    "congestion_surcharge": "double",
}
# The schema parse_records types each record by.
TRIP_SCHEMA = ", ".join(f"`{name}` {kind}" for name, kind in TRIP_COLUMNS.items())
# Where each row came from: a file, or a Kafka message.
SOURCE_COLUMNS = PROVENANCE_COLUMNS
# Where the rules of check_trips are declared.
EXPECTATIONS_FILE = "conf/base/parameters_expectations.yml"


def parse_trips(raw_trips: DataFrame) -> DataFrame:
    """Types the fields of raw trip records and notes what did not parse.

    Args:
        raw_trips: Either one JSON record per row in a ``value`` column (text
            lines of a file, or the bytes of Kafka messages); or one column
            per TLC field (CSV or parquet files), with an optional
            ``_corrupt_record`` column. Datetimes may be ISO-8601 strings or
            epoch milliseconds.

    Returns:
        The TLC fields with their types, ``raw_payload``, ``problems`` (null
        when the record parsed) and the ``SOURCE_COLUMNS``: kedro-streaming's
        ``parse_records`` with ``TRIP_SCHEMA``.
    """
    return parse_records(raw_trips, TRIP_SCHEMA)


def check_trips(
    parsed_trips: DataFrame, taxi_zones: DataFrame, trip_expectations: dict[str, Any]
) -> DataFrame:
    """Checks every parsed trip against the expectations and names what it breaks.

    A trip that did not parse is rejected with its parse problems. Every
    other trip is checked against ``trip_expectations`` (declared in
    ``conf/base/parameters_expectations.yml``), whose expressions can use the
    TLC fields, ``raw_payload``, the ``SOURCE_COLUMNS``, and
    ``pickup_zone_known`` and ``dropoff_zone_known``: whether the zone lookup
    has the location ID (null without one). Rejected trips stay in the output
    with their reasons and raw payload (the quarantine), so that every record
    read is written exactly once, in one table, by one query.

    Args:
        parsed_trips: Output of ``parse_trips``.
        taxi_zones: Zone lookup with a ``LocationID`` column.
        trip_expectations: ``{rule name: {expect: <Spark SQL>, action: warn |
            quarantine | fail}}``.

    Returns:
        The TLC fields, ``rejection_reason`` (null for a valid trip; else the
        parse problems or the names of the quarantine rules it breaks,
        ``; ``-separated), ``warnings`` (the ``warn`` rules it breaks),
        ``raw_payload`` (for rejected trips only) and the ``SOURCE_COLUMNS``.
        Each micro-batch reports the count of every rule (the observed metric
        ``expectations``).
    """
    # Small and static: looked up by key, read once, no join per micro-batch.
    zones = Lookup(taxi_zones.select("LocationID"), key="LocationID")
    with_zones = parsed_trips.select(
        *TRIP_COLUMNS,
        "raw_payload",
        "problems",
        *SOURCE_COLUMNS,
        zones.has(F.col("PULocationID")).alias("pickup_zone_known"),
        zones.has(F.col("DOLocationID")).alias("dropoff_zone_known"),
    )
    checked = check_expectations(
        with_zones,
        trip_expectations,
        declared_in=f"trip_expectations, {EXPECTATIONS_FILE}",
        origin=record_origin(with_zones),
        problems="problems",
    )
    rejected = F.col("rejection_reason").isNotNull()
    return checked.select(
        *TRIP_COLUMNS,
        "rejection_reason",
        "warnings",
        F.when(rejected, F.col("raw_payload")).alias("raw_payload"),
        *SOURCE_COLUMNS,
    )
