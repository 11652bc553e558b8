"""Records of a stream, typed by a schema, with every problem named: a record
is never dropped and never fails the query; ``check_expectations`` then
quarantines it with its ``problems``."""

from __future__ import annotations

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from kedro_streaming._connectors.streams import as_nullable
from kedro_streaming.errors import StreamingConfigError

CORRUPT_RECORD = "_corrupt_record"
# A Kafka dataset's Avro option decodes each message into these columns.
AVRO_RECORD, AVRO_PROBLEM = "value_record", "value_problem"
# Kafka's metadata columns, kept on every row as its origin: name and type.
_KAFKA_ORIGIN = {
    "topic": ("kafka_topic", "string"),
    "partition": ("kafka_partition", "int"),
    "offset": ("kafka_offset", "long"),
    "timestamp": ("kafka_timestamp", "timestamp"),
}
# Where each row came from. No processing-time column on purpose: Spark writes
# a micro-batch's current_timestamp() into the generated code as a constant,
# so such a column makes Spark compile the whole query again every micro-batch.
PROVENANCE_COLUMNS = ("source_file", *[name for name, _ in _KAFKA_ORIGIN.values()])
# Decoded straight into their type from JSON, where their form is
# unambiguous. Datetimes (ISO text or epoch milliseconds), dates, text and
# binary fields are decoded as text and typed by the same rules on every path.
_NESTED_TYPES = (T.ArrayType, T.MapType, T.StructType)
_DECODED_TYPES = (T.NumericType, T.BooleanType, *_NESTED_TYPES)


# `schema` is a DDL string or a StructType; hinted `object`, since Kedro 1.7
# warns of a union in the hint of a node's parameter at every command.
def parse_records(raw: DataFrame, schema: object) -> DataFrame:
    """Types raw records by ``schema`` (DDL or a ``StructType``; ``NOT NULL``
    fields are required) and names what did not parse.

    ``raw`` holds JSON records in a ``value`` column (text lines, Kafka
    bytes), Avro records a Kafka dataset decoded (``value_record``), or one
    column per field (CSV, parquet; maybe a ``_corrupt_record``). The result
    has the typed fields, ``raw_payload`` (base64 when not UTF-8), the
    ``PROVENANCE_COLUMNS``, and ``problems``: null, or ``; ``-joined
    ``empty record``, ``not UTF-8 text ...``, ``not a valid record``,
    ``invalid <field>`` or ``missing <field>``. Datetimes may be ISO-8601 or
    epoch milliseconds, integers whole floats (``"2.0"``); text is trimmed,
    and empty text is null.

    Example:
        >>> from kedro_streaming import parse_records
        >>> raw = spark.createDataFrame(
        ...     [('{"device": "d1", "temperature_c": 21.5}',),
        ...      ('{"temperature_c": "hot"}',)],
        ...     "value STRING",
        ... )
        >>> parsed = parse_records(raw, "device STRING NOT NULL, temperature_c DOUBLE")
        >>> parsed.select("device", "temperature_c", "problems").collect()
        [Row(device='d1', temperature_c=21.5, problems=None),
         Row(device=None, temperature_c=None,
             problems='missing device; invalid temperature_c')]
    """
    fields = _struct(schema)
    columns = raw.columns
    if AVRO_RECORD in columns:
        records = _avro_records(raw, fields)
    elif "value" in columns and not set(fields.fieldNames()) <= set(columns):
        records = _decode_json_values(raw, fields)
    else:
        records = _field_columns(raw, fields)
    # Written as SQL: a Column built in Python costs a call into the JVM per
    # function and operator, about 3,000 for the example's 20 fields.
    native = (
        set(records.schema["_native_record"].dataType.fieldNames())
        if "_native_record" in records.columns
        else set()
    )
    typed, problems = {}, ["_decode_problem"]
    for field in fields:
        name = field.name
        if name in native:
            given = typed[name] = f"_native_record[{_text(name)}]"
        elif _decoded(field.dataType):
            # Typed by the decoder; its text is there only if the record did not fit.
            given = f"_text_record[{_text(name)}]"
            typed[name] = (
                f"coalesce(_record[{_text(name)}], {_typed(given, field.dataType)})"
            )
        else:
            given = f"coalesce(_record[{_text(name)}], _text_record[{_text(name)}])"
            typed[name] = _typed(given, field.dataType)
        if name not in native and isinstance(field.dataType, T.StringType):
            # Any text is a string; blank text is no value (typed: null).
            present = f"({typed[name]}) IS NOT NULL"
        else:
            present = f"({given}) IS NOT NULL"
            problems.append(
                f"CASE WHEN {present} AND ({typed[name]}) IS NULL "
                f"THEN {_text(f'invalid {name}')} END"
            )
        if not field.nullable:
            problems.append(
                f"CASE WHEN _decode_problem IS NULL AND NOT ({present}) "
                f"AND ({typed[name]}) IS NULL THEN {_text(f'missing {name}')} END"
            )

    parsed = records.selectExpr(
        *[f"{column} AS {sql_name(name)}" for name, column in typed.items()],
        "raw_payload",
        f"concat_ws('; ', {', '.join(problems)}) AS problems",
        "CASE WHEN input_file_name() != '' THEN input_file_name() END AS source_file",
        *PROVENANCE_COLUMNS[1:],
    )
    return parsed.withColumn("problems", _unless_empty("problems"))


def record_origin(records: DataFrame) -> Column:
    """Where a record came from (its ``PROVENANCE_COLUMNS``) and its start
    (``raw_payload``, else the record as JSON): for a ``fail`` expectation.

    Example:
        >>> from kedro_streaming import record_origin
        >>> readings = spark.createDataFrame(
        ...     [("d1", 21.5)], "device STRING, temperature_c DOUBLE"
        ... )
        >>> readings.select(record_origin(readings).alias("origin")).collect()
        [Row(origin='input, record {"device":"d1","temperature_c":21.5}')]
    """
    columns = set(records.columns)
    places = []
    if "source_file" in columns:
        places.append(F.concat(F.lit("file "), "source_file"))
    if {"kafka_topic", "kafka_partition", "kafka_offset"} <= columns:
        places.append(
            F.concat(
                F.lit("Kafka topic "),
                F.col("kafka_topic"),
                F.lit(" partition "),
                F.col("kafka_partition"),
                F.lit(" offset "),
                F.col("kafka_offset"),
            )
        )
    payload = (
        F.col("raw_payload")
        if "raw_payload" in columns
        else F.to_json(F.struct(*[F.col(sql_name(name)) for name in records.columns]))
    )
    return F.concat(
        F.coalesce(*places, F.lit("input")),
        F.lit(", record "),
        F.substring(payload, 1, 200),
    )


def _struct(schema: object) -> T.StructType:
    if isinstance(schema, T.StructType):
        return schema
    if not isinstance(schema, str) or not schema.strip():
        raise ValueError(
            f"parse_records takes a schema as DDL text or a StructType, not {schema!r}"
        )
    try:
        parsed = T._parse_datatype_string(schema)  # as spark.read.schema(...) does
    except PySparkException as error:
        # Spark's message has the type it does not know, and where, first.
        reason = str(error).strip().splitlines()[0]
        raise StreamingConfigError(
            f"The record schema {schema!r} is not Spark SQL DDL: {reason}. Fix it "
            "where it is declared (a parameter, e.g. in conf/base/parameters.yml); "
            "types: STRING, INT, BIGINT, DOUBLE, DECIMAL(p,s), BOOLEAN, DATE, "
            "TIMESTAMP, ARRAY<...>, MAP<...>, STRUCT<...>."
        ) from None
    if not isinstance(parsed, T.StructType):
        raise ValueError(f"the schema {schema!r} is not a list of fields")
    return parsed


def _decoded(kind: T.DataType) -> bool:
    return isinstance(kind, _DECODED_TYPES)


def _decode_json_values(raw: DataFrame, fields: T.StructType) -> DataFrame:
    """``value`` (a text line or message bytes) -> the JSON record's fields,
    one row per value, with a ``_decode_problem`` where it is no record.

    Each is decoded once into the field types (``_record``); only a record
    that does not fit is decoded again as text (``_text_record``), so that
    each field can be typed leniently and each problem named.
    """
    options = (
        f"map('mode', 'PERMISSIVE', 'columnNameOfCorruptRecord', '{CORRUPT_RECORD}')"
    )
    # Text lines are strings already; Kafka values are bytes (kept as they are,
    # valid UTF-8 or not, so that the payload survives).
    decoded = raw.select(
        F.col("value").cast("string").alias("_text"), *_origin_columns(raw)
    )
    # As JSON, which from_json takes as it takes DDL, and which holds any
    # field name as it is (a space or a backtick in a nested name too).
    typed_schema = _text(_json_schema(fields, typed=True).json())
    text_schema = _text(_json_schema(fields, typed=False).json())
    typed = f"from_json(_text, {typed_schema}, {options})"
    fits = (
        f"is_valid_utf8(_text) AND {typed} IS NOT NULL "
        f"AND {typed}[{_text(CORRUPT_RECORD)}] IS NULL"
    )
    # Both decodes in one Project, the typed one written thrice and evaluated
    # once (a common subexpression): from_json has no generated code of its
    # own (Spark's CodegenFallback), so each Project holding it runs outside
    # whole-stage code generation and writes out every row it makes; one
    # such Project instead of two: 4.46 s against 5.38 s per million trips.
    decoded = decoded.selectExpr(
        "*",
        "is_valid_utf8(_text) AS _is_utf8",
        f"{fits} AS _fits",
        f"CASE WHEN {fits} THEN {typed} END AS _fitting",
        f"CASE WHEN NOT ({fits}) THEN from_json(_text, {text_schema}, {options}) "
        "END AS _as_text",
    )
    corrupt = f"_as_text[{_text(CORRUPT_RECORD)}]"
    return decoded.selectExpr(
        "_fitting AS _record",
        # Only the text of a record that did not fit but is one.
        f"CASE WHEN NOT _fits AND _is_utf8 AND {corrupt} IS NULL THEN _as_text "
        "END AS _text_record",
        # Spark's base64 breaks lines every 76 characters; one line is easier to use.
        "CASE WHEN _is_utf8 THEN _text "
        "ELSE regexp_replace(base64(CAST(_text AS BINARY)), '\\\\s', '') "
        "END AS raw_payload",
        "CASE WHEN _fits THEN NULL "
        # from_json gives no record at all for a blank value.
        "WHEN _as_text IS NULL THEN 'empty record' "
        "WHEN NOT _is_utf8 THEN 'not UTF-8 text (raw_payload is base64)' "
        f"WHEN {corrupt} IS NOT NULL THEN 'not a valid record' "
        "END AS _decode_problem",
        *PROVENANCE_COLUMNS[1:],
    )


def _avro_records(raw: DataFrame, fields: T.StructType) -> DataFrame:
    """Avro records the Kafka dataset decoded -> the fields: as they are where
    the Avro type is the schema's, else as text to type."""
    avro = raw.schema[AVRO_RECORD].dataType
    given = {field.name: field.dataType for field in avro.fields}
    record = F.col(AVRO_RECORD)
    native = [f for f in fields if given.get(f.name) == f.dataType]
    other = [f for f in fields if f not in native]
    columns = {
        f.name: (
            F.lit(None).cast("string")  # not in the reader schema: missing
            if f.name not in given
            else F.to_json(record[f.name])
            if isinstance(given[f.name], _NESTED_TYPES)
            else record[f.name].cast("string")
        )
        for f in other
    } or {"_none": F.lit(None).cast("string")}  # a struct needs a field
    value = F.col("value")
    return raw.select(
        F.struct(*[record[f.name].alias(f.name) for f in native]).alias(
            "_native_record"
        ),
        F.lit(None).cast(_json_schema(fields, typed=True)).alias("_record"),
        F.when(
            record.isNotNull(),
            F.struct(*[c.cast("string").alias(n) for n, c in columns.items()]),
        ).alias("_text_record"),
        # The record as JSON; bytes that did not decode, as base64.
        F.when(record.isNotNull(), F.to_json(record))
        .otherwise(F.regexp_replace(F.base64(value), r"\s", ""))
        .alias("raw_payload"),
        # The value's problem, else the key's (when keys are Avro too).
        (
            F.coalesce(F.col(AVRO_PROBLEM), F.concat(F.lit("key: "), "key_problem"))
            if "key_problem" in raw.columns
            else F.col(AVRO_PROBLEM)
        ).alias("_decode_problem"),
        *_origin_columns(raw),
    )


def _field_columns(raw: DataFrame, fields: T.StructType) -> DataFrame:
    """One column per field (CSV, parquet) -> the fields as text, to type."""
    missing = [name for name in fields.fieldNames() if name not in raw.columns]
    if missing:
        raise ValueError(
            f"parse_records: the input has neither a `value` column (one JSON "
            f"record per row) nor the column(s) {', '.join(missing)} of the "
            f"schema; its columns are {', '.join(raw.columns)}"
        )
    corrupt = F.col(CORRUPT_RECORD) if CORRUPT_RECORD in raw.columns else F.lit(None)
    columns = [
        (
            F.to_json(F.col(sql_name(field.name)))
            if isinstance(raw.schema[field.name].dataType, _NESTED_TYPES)
            else F.col(sql_name(field.name)).cast("string")
        ).alias(field.name)
        for field in fields
    ]
    return raw.select(
        F.lit(None).cast(_json_schema(fields, typed=True)).alias("_record"),
        F.when(corrupt.isNull(), F.struct(*columns)).alias("_text_record"),
        F.coalesce(corrupt, F.to_json(F.struct(*columns))).alias("raw_payload"),
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


def _typed(text: str, kind: T.DataType) -> str:
    """SQL parsing SQL ``text`` into ``kind``: null instead of failing."""
    if isinstance(kind, T.TimestampType):
        # pandas' to_json and many producers write epoch milliseconds. A
        # datetime has a ":", so the pattern is only tried on the rest; and
        # only digits are cast, since a failed cast costs Spark an exception.
        return (
            f"CASE WHEN NOT contains({text}, ':') "
            f"AND trim({text}) RLIKE '^-?[0-9]{{1,15}}$' "
            f"THEN timestamp_millis(try_cast(trim({text}) AS BIGINT)) "
            f"ELSE try_to_timestamp({text}) END"
        )
    if isinstance(kind, T.IntegralType):
        # Files often carry integer codes as floats ("1.0") where values miss.
        as_double = f"try_cast({text} AS DOUBLE)"
        whole = (
            f"CASE WHEN {as_double} = floor({as_double}) "
            f"THEN try_cast({as_double} AS {kind.simpleString()}) END"
        )
        # (A long beyond a double's precision is cast directly.)
        long = kind == T.LongType()
        return f"coalesce(try_cast({text} AS BIGINT), {whole})" if long else whole
    if isinstance(kind, T.StringType):
        return f"CASE WHEN trim({text}) != '' THEN trim({text}) END"
    if isinstance(kind, T.BinaryType):
        return f"try_to_binary({text}, 'base64')"
    if isinstance(kind, _NESTED_TYPES):
        return f"from_json({text}, {_text(kind.json())})"
    return f"try_cast({text} AS {kind.simpleString()})"


def _text(value: str) -> str:
    """``value`` as a SQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_name(name: str) -> str:
    """``name`` as a SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def _json_schema(fields: T.StructType, typed: bool) -> T.StructType:
    """The fields as from_json decodes them: as text unless ``typed`` and
    decoded; and the corrupt record's column."""
    return T.StructType(
        [
            T.StructField(
                field.name,
                as_nullable(field.dataType)
                if typed and _decoded(field.dataType)
                else T.StringType(),
            )
            for field in fields
        ]
        + [T.StructField(CORRUPT_RECORD, T.StringType())]
    )


def _unless_empty(name: str) -> Column:
    """Column ``name`` (made by the select before, so that Spark joins the
    messages once per row), null when empty."""
    return F.when(F.col(name) != "", F.col(name)).alias(name)
