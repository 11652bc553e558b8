"""Ingest: raw trip records in, typed and validated trips out.

Every function takes and returns DataFrames and works the same on batch and
streaming input. Nothing is dropped: every record read becomes one row of
``bronze_trips``, a valid trip or a rejected one with its reasons.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from {{ cookiecutter.python_package }}.streaming import check_expectations

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
CORRUPT_RECORD = "_corrupt_record"
# Where each row came from: a file, or a Kafka message. There is no
# processing-time column on purpose: Spark writes a micro-batch's
# current_timestamp() into the generated code as a constant, so such a column
# makes Spark compile the whole query again for every micro-batch.
SOURCE_COLUMNS = (
    "source_file",
    "kafka_topic",
    "kafka_partition",
    "kafka_offset",
    "kafka_timestamp",
)
# Kafka's metadata columns, kept on every row as its origin: name and type.
_KAFKA_ORIGIN = {
    "topic": ("kafka_topic", "string"),
    "partition": ("kafka_partition", "int"),
    "offset": ("kafka_offset", "long"),
    "timestamp": ("kafka_timestamp", "timestamp"),
}
# The fields a JSON record is decoded straight into: numbers, whose JSON
# form is unambiguous. Datetimes (ISO text or epoch milliseconds) and text
# fields are decoded as text and typed by the same rules on every path.
_DECODED_KINDS = {
    name: kind for name, kind in TRIP_COLUMNS.items() if kind in ("int", "double")
}
# Where the rules of check_trips are declared.
EXPECTATIONS_FILE = "conf/base/parameters_expectations.yml"


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
        received; base64 when it was not UTF-8 text), ``problems`` (the
        reasons, ``; ``-separated; null when the record parsed), and the
        ``SOURCE_COLUMNS``.
    """
    records = (
        _decode_json_values(raw_trips)
        if "value" in raw_trips.columns
        else _field_columns(raw_trips)
    )
    record, text = F.col("_record"), F.col("_text_record")
    fields, problems = {}, [F.col("_decode_problem")]
    for name, kind in TRIP_COLUMNS.items():
        if name in _DECODED_KINDS:
            # Typed by the decoder; its text is there only if the record did not fit.
            given = text[name]
            fields[name] = F.coalesce(record[name], _typed(given, kind))
        else:
            given = F.coalesce(record[name], text[name])
            fields[name] = _typed(given, kind)
        problems.append(
            F.when(given.isNotNull() & fields[name].isNull(), F.lit(f"invalid {name}"))
        )

    source_file = F.input_file_name()
    parsed = records.select(
        *[column.alias(name) for name, column in fields.items()],
        "raw_payload",
        F.concat_ws("; ", *problems).alias("problems"),
        F.when(source_file != "", source_file).alias("source_file"),
        *[F.col(name) for name, _ in _KAFKA_ORIGIN.values()],
    )
    return parsed.withColumn("problems", _unless_empty("problems"))


def _decode_json_values(raw: DataFrame) -> DataFrame:
    """``value`` (a text line or message bytes) -> the JSON record's fields.

    Every value gives exactly one row, whatever it holds: an empty or null
    value, bytes that are not UTF-8, or text that is not a JSON object each
    get a ``_decode_problem`` and keep their payload.

    Most records are well formed, so each is decoded once, straight into the
    field types, as Spark's JSON reader would (``_record``; datetimes stay
    text). Only a record that does not fit those types is decoded again with
    every field as text (``_text_record``), so that each field can be typed
    leniently and each problem named.
    """
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_RECORD}
    # Text lines are strings already; Kafka values are bytes (kept as they are,
    # valid UTF-8 or not, so that the payload survives).
    decoded = raw.select(
        F.col("value").cast("string").alias("_text"), *_origin_columns(raw)
    )
    text = F.col("_text")
    decoded = decoded.select(
        "*",
        F.is_valid_utf8(text).alias("_is_utf8"),
        F.from_json(text, _json_schema(_DECODED_KINDS), options).alias("_typed_record"),
    )
    typed_record = F.col("_typed_record")
    fits = (
        F.col("_is_utf8")
        & typed_record.isNotNull()
        & typed_record[CORRUPT_RECORD].isNull()
    )
    decoded = decoded.select(
        "*",
        fits.alias("_fits"),
        F.when(~fits, F.from_json(text, _json_schema({}), options)).alias(
            "_text_record"
        ),
    )
    text_record = F.col("_text_record")
    problem = (
        F.when(F.col("_fits"), F.lit(None))
        # from_json gives no record at all for a blank value.
        .when(text_record.isNull(), F.lit("empty record"))
        .when(~F.col("_is_utf8"), F.lit("not UTF-8 text (raw_payload is base64)"))
        .when(text_record[CORRUPT_RECORD].isNotNull(), F.lit("not a valid record"))
    )
    return decoded.select(
        F.when(F.col("_fits"), typed_record).alias("_record"),
        # Only the text of a record that did not fit but is one.
        F.when(
            ~F.col("_fits") & F.col("_is_utf8") & text_record[CORRUPT_RECORD].isNull(),
            text_record,
        ).alias("_text_record"),
        # Spark's base64 breaks lines every 76 characters; one line is easier to use.
        F.when(F.col("_is_utf8"), F.col("_text"))
        .otherwise(F.regexp_replace(F.base64(text.cast("binary")), r"\s", ""))
        .alias("raw_payload"),
        problem.alias("_decode_problem"),
        *[F.col(name) for name, _ in _KAFKA_ORIGIN.values()],
    )


def _field_columns(raw: DataFrame) -> DataFrame:
    """One column per TLC field (CSV, parquet) -> the fields as text, to type."""
    corrupt = F.col(CORRUPT_RECORD) if CORRUPT_RECORD in raw.columns else F.lit(None)
    fields = [F.col(name).cast("string").alias(name) for name in TRIP_COLUMNS]
    return raw.select(
        F.lit(None).cast(_json_schema(_DECODED_KINDS)).alias("_record"),
        F.when(corrupt.isNull(), F.struct(*fields)).alias("_text_record"),
        F.coalesce(corrupt, F.to_json(F.struct(*fields))).alias("raw_payload"),
        F.when(corrupt.isNotNull(), F.lit("not a valid record")).alias(
            "_decode_problem"
        ),
        *_origin_columns(raw),
    )


def _origin_columns(raw: DataFrame) -> list[Column]:
    return [
        (F.col(column) if column in raw.columns else F.lit(None).cast(kind)).alias(name)
        for column, (name, kind) in _KAFKA_ORIGIN.items()
    ]


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
    # The lookup is read again for every micro-batch; in one partition, it is
    # deduplicated without a shuffle stage.
    known_ids = F.broadcast(
        taxi_zones.select("LocationID").coalesce(1).dropDuplicates()
    )
    with_zones = parsed_trips.join(
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
    with_zones = with_zones.select(
        *TRIP_COLUMNS,
        "raw_payload",
        "problems",
        *SOURCE_COLUMNS,
        *[
            F.when(F.col(id_column).isNotNull(), F.col(found).isNotNull()).alias(name)
            for id_column, found, name in (
                ("PULocationID", "_pu_known", "pickup_zone_known"),
                ("DOLocationID", "_do_known", "dropoff_zone_known"),
            )
        ],
    )
    checked = check_expectations(
        with_zones,
        trip_expectations,
        declared_in=f"trip_expectations, {EXPECTATIONS_FILE}",
        origin=_origin(),
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


def _origin() -> Column:
    """Where a record came from, and its start: for a failed expectation."""
    kafka = F.concat(
        F.lit("Kafka topic "),
        F.col("kafka_topic"),
        F.lit(" partition "),
        F.col("kafka_partition"),
        F.lit(" offset "),
        F.col("kafka_offset"),
    )
    return F.concat(
        F.coalesce(F.concat(F.lit("file "), "source_file"), kafka, F.lit("input")),
        F.lit(", record "),
        F.substring("raw_payload", 1, 200),
    )


def _typed(text: Column, kind: str) -> Column:
    """Parses text into ``kind``, giving null instead of failing."""
    if kind == "timestamp":
        # pandas' to_json and many producers write epoch milliseconds. A
        # datetime has a ":", so the pattern is only tried on the rest; and
        # only digits are cast, since a failed cast costs Spark an exception.
        digits = F.trim(text)
        return F.when(
            ~text.contains(":") & digits.rlike(r"^-?[0-9]{1,15}$"),
            F.timestamp_millis(digits.try_cast("long")),
        ).otherwise(F.try_to_timestamp(text))
    if kind == "int":
        # TLC files carry integer codes as floats ("1.0") where values are missing.
        as_double = text.try_cast("double")
        return F.when(as_double == F.floor(as_double), as_double.try_cast("int"))
    if kind == "double":
        return text.try_cast("double")
    text = F.trim(text)
    return F.when(text != "", text)


def _json_schema(kinds: dict[str, str]) -> str:
    """A DDL schema of the trip fields, as text unless ``kinds`` types them."""
    fields = [f"`{name}`: {kinds.get(name, 'string')}" for name in TRIP_COLUMNS]
    return f"struct<{', '.join([*fields, f'`{CORRUPT_RECORD}`: string'])}>"


def _unless_empty(name: str) -> Column:
    """A column of ``; ``-joined messages, null when there are none.

    Applied to a column made by the select before, not to the joining
    expression itself, so that Spark joins the messages once per row.
    """
    return F.when(F.col(name) != "", F.col(name)).alias(name)
