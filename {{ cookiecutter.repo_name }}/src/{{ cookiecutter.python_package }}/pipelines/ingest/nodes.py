"""Ingest: raw trip records in, typed and validated trips out.

Every function takes and returns DataFrames and works the same on batch and
streaming input. Nothing is dropped: a row is either a bronze trip or a
quarantined record with the reasons it was rejected.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
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
REQUIRED_COLUMNS = (
    "lpep_pickup_datetime",
    "lpep_dropoff_datetime",
    "PULocationID",
    "DOLocationID",
    "fare_amount",
    "total_amount",
)
NON_NEGATIVE_COLUMNS = (
    "trip_distance",
    "fare_amount",
    "extra",
    "mta_tax",
    "tip_amount",
    "tolls_amount",
    "improvement_surcharge",
    "total_amount",
    "congestion_surcharge",
)
BOUNDED_AMOUNT_COLUMNS = ("fare_amount", "total_amount")
CORRUPT_RECORD = "_corrupt_record"
# Where each row came from: a file, or a Kafka message.
SOURCE_COLUMNS = (
    "source_file",
    "kafka_topic",
    "kafka_partition",
    "kafka_offset",
    "kafka_timestamp",
    "ingested_at",
)
# Kafka's metadata columns, kept on every row as its origin: name and type.
_KAFKA_ORIGIN = {
    "topic": ("kafka_topic", "string"),
    "partition": ("kafka_partition", "int"),
    "offset": ("kafka_offset", "long"),
    "timestamp": ("kafka_timestamp", "timestamp"),
}
# Observed per micro-batch; the hooks' progress lines show metrics of this name.
QUARANTINED_METRIC = "quarantined"


def parse_trips(raw_trips: DataFrame) -> DataFrame:
    """Types the fields of raw trip records and notes what did not parse.

    Args:
        raw_trips: Either one JSON record per row in a ``value`` column (text
            lines of a file, or the bytes of Kafka messages with ``topic``,
            ``partition``, ``offset`` and ``timestamp``); or one column per
            TLC field (CSV or parquet files), with an optional
            ``_corrupt_record`` column holding lines that were not records.
            Datetimes may be ISO-8601 strings or epoch milliseconds.

    Returns:
        The TLC fields with their types, ``raw_payload`` (the record as
        received; base64 when it was not UTF-8 text), ``problems`` (an array
        of reasons, empty when the record parsed), and the ``SOURCE_COLUMNS``.
    """
    records = (
        _decode_json_values(raw_trips)
        if "value" in raw_trips.columns
        else _field_columns(raw_trips)
    )
    decoded = F.col("_decode_problem").isNull()
    raw = {name: F.col(name) for name in TRIP_COLUMNS}
    typed = {name: _typed(raw[name], kind) for name, kind in TRIP_COLUMNS.items()}

    problems = [F.col("_decode_problem")]
    problems += [
        F.when(decoded & raw[name].isNull(), F.lit(f"missing {name}"))
        for name in REQUIRED_COLUMNS
    ]
    problems += [
        F.when(raw[name].isNotNull() & typed[name].isNull(), F.lit(f"invalid {name}"))
        for name in TRIP_COLUMNS
    ]

    source_file = F.input_file_name()
    return records.select(
        *[typed[name].alias(name) for name in TRIP_COLUMNS],
        "raw_payload",
        _present(problems).alias("problems"),
        F.when(source_file != "", source_file).alias("source_file"),
        *[F.col(name) for name, _ in _KAFKA_ORIGIN.values()],
        F.current_timestamp().alias("ingested_at"),
    )


def _decode_json_values(raw: DataFrame) -> DataFrame:
    """``value`` (a text line or message bytes) -> the JSON record's fields as text.

    Every value gives exactly one row, whatever it holds: an empty or null
    value, bytes that are not UTF-8, or text that is not a JSON object each
    get a ``_decode_problem`` and keep their payload.
    """
    value = F.col("value")
    text = value.cast("string")
    schema = ", ".join(f"`{name}` STRING" for name in [*TRIP_COLUMNS, CORRUPT_RECORD])
    record = F.from_json(
        text, schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_RECORD}
    )
    is_text = F.is_valid_utf8(text)
    problem = (
        # from_json gives no record at all for a blank value.
        F.when(value.isNull() | record.isNull(), F.lit("empty record"))
        .when(~is_text, F.lit("not UTF-8 text (raw_payload is base64)"))
        .when(record[CORRUPT_RECORD].isNotNull(), F.lit("not a valid record"))
    )
    return raw.select(
        *[F.when(problem.isNull(), record[name]).alias(name) for name in TRIP_COLUMNS],
        # Spark's base64 breaks lines every 76 characters; one line is easier to use.
        F.when(is_text, text)
        .otherwise(F.regexp_replace(F.base64(value.cast("binary")), r"\s", ""))
        .alias("raw_payload"),
        problem.alias("_decode_problem"),
        *_origin_columns(raw),
    )


def _field_columns(raw: DataFrame) -> DataFrame:
    """One column per TLC field (CSV, parquet) -> the fields as text."""
    corrupt = F.col(CORRUPT_RECORD) if CORRUPT_RECORD in raw.columns else F.lit(None)
    fields = [F.col(name).cast("string").alias(name) for name in TRIP_COLUMNS]
    return raw.select(
        *fields,
        F.coalesce(corrupt, F.to_json(F.struct(*fields))).alias("raw_payload"),
        F.when(corrupt.isNotNull(), F.lit("not a valid record")).alias("_decode_problem"),
        *_origin_columns(raw),
    )


def _origin_columns(raw: DataFrame) -> list[Column]:
    return [
        (F.col(column) if column in raw.columns else F.lit(None).cast(kind)).alias(name)
        for column, (name, kind) in _KAFKA_ORIGIN.items()
    ]


def split_valid_trips(
    parsed_trips: DataFrame, taxi_zones: DataFrame, validation: dict[str, Any]
) -> tuple[DataFrame, DataFrame]:
    """Splits parsed trips into valid trips and quarantined records.

    A trip is rejected when it did not parse, when its dropoff is before its
    pickup or more than ``max_trip_hours`` after it, when a money or distance
    field is negative, when a fare or total exceeds ``max_amount``, or when a
    location ID is not in the zone lookup.

    Args:
        parsed_trips: Output of ``parse_trips``.
        taxi_zones: Zone lookup with a ``LocationID`` column.
        validation: ``max_trip_hours`` and ``max_amount``.

    Returns:
        ``bronze_trips``: the TLC fields plus the ``SOURCE_COLUMNS``;
        ``quarantined_trips``: ``raw_payload``, ``rejection_reason`` and the
        ``SOURCE_COLUMNS``. Each micro-batch also reports how many rows it
        quarantined, as the observed metric ``quarantined``.
    """
    known_ids = F.broadcast(taxi_zones.select("LocationID").dropDuplicates())
    checked = parsed_trips.join(
        known_ids.select(
            F.col("LocationID").alias("PULocationID"), F.lit(True).alias("_pu_known")
        ),
        "PULocationID",
        "left",
    ).join(
        known_ids.select(
            F.col("LocationID").alias("DOLocationID"), F.lit(True).alias("_do_known")
        ),
        "DOLocationID",
        "left",
    )

    pickup, dropoff = F.col("lpep_pickup_datetime"), F.col("lpep_dropoff_datetime")
    trip_seconds = dropoff.cast("long") - pickup.cast("long")
    max_hours = validation["max_trip_hours"]
    rules = [
        F.when(dropoff < pickup, F.lit("dropoff before pickup")),
        F.when(
            trip_seconds > max_hours * 3600,
            F.lit(f"trip longer than {max_hours} hours"),
        ),
        *[
            F.when(F.col(name) < 0, F.lit(f"negative {name}"))
            for name in NON_NEGATIVE_COLUMNS
        ],
        *[
            F.when(
                F.col(name) > validation["max_amount"],
                F.lit(f"{name} above {validation['max_amount']}"),
            )
            for name in BOUNDED_AMOUNT_COLUMNS
        ],
        F.when(
            F.col("PULocationID").isNotNull() & F.col("_pu_known").isNull(),
            F.lit("unknown PULocationID"),
        ),
        F.when(
            F.col("DOLocationID").isNotNull() & F.col("_do_known").isNull(),
            F.lit("unknown DOLocationID"),
        ),
    ]
    reasons = F.concat(F.col("problems"), _present(rules))
    checked = checked.withColumn(
        "rejection_reason", F.when(F.size(reasons) > 0, F.concat_ws("; ", reasons))
    ).observe(
        QUARANTINED_METRIC,
        F.count(F.col("rejection_reason")).alias(QUARANTINED_METRIC),
    )

    bronze_trips = checked.filter(F.col("rejection_reason").isNull()).select(
        *TRIP_COLUMNS, *SOURCE_COLUMNS
    )
    quarantined_trips = checked.filter(F.col("rejection_reason").isNotNull()).select(
        "raw_payload", "rejection_reason", *SOURCE_COLUMNS
    )
    return bronze_trips, quarantined_trips


def _typed(text: Column, kind: str) -> Column:
    """Parses text into ``kind``, giving null instead of failing."""
    text = F.trim(text)
    if kind == "timestamp":
        # pandas' to_json and many producers write epoch milliseconds.
        return F.when(
            text.rlike(r"^-?[0-9]{1,15}$"), F.timestamp_millis(text.try_cast("long"))
        ).otherwise(F.try_to_timestamp(text))
    if kind == "int":
        # TLC files carry integer codes as floats ("1.0") where values are missing.
        as_double = text.try_cast("double")
        return F.when(as_double == F.floor(as_double), as_double.try_cast("int"))
    if kind == "double":
        return text.try_cast("double")
    return F.when(text != "", text)


def _present(conditions: list[Column]) -> Column:
    """The messages of the conditions that hold, as an array without nulls."""
    return F.filter(F.array(*conditions), lambda message: message.isNotNull())
