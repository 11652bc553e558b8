"""Records of a stream, typed by a schema, with every problem named.

``parse_records`` turns raw records (JSON lines of a file, Kafka message
values, or one column per field from CSV or parquet) into typed columns. It
never drops a record and never fails on one: a record that is not a record,
or a field that does not fit its type, is named in ``problems``, and the
record keeps its raw payload and where it came from. ``check_expectations``
then quarantines it with those problems. A node::

    node(parse_records, ["raw_readings", "params:reading_schema"], "parsed_readings")

with, in ``parameters.yml``::

    reading_schema: "device STRING NOT NULL, at TIMESTAMP, temperature_c DOUBLE"
"""

from __future__ import annotations

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from kedro_streaming.errors import StreamingConfigError

CORRUPT_RECORD = "_corrupt_record"
# A Kafka dataset's Avro option decodes each message into these columns.
AVRO_RECORD, AVRO_PROBLEM = "value_record", "value_problem"
# Where each row came from: a file, or a Kafka message. There is no
# processing-time column on purpose: Spark writes a micro-batch's
# current_timestamp() into the generated code as a constant, so such a column
# makes Spark compile the whole query again for every micro-batch.
PROVENANCE_COLUMNS = (
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
# Decoded straight into their type from JSON, where their form is
# unambiguous. Datetimes (ISO text or epoch milliseconds), dates, text and
# binary fields are decoded as text and typed by the same rules on every path.
_NESTED_TYPES = (T.ArrayType, T.MapType, T.StructType)
_DECODED_TYPES = (T.NumericType, T.BooleanType, *_NESTED_TYPES)


# `schema` is a DDL string or a StructType; hinted `object`, since Kedro 1.7
# warns of a union in the hint of a node's parameter at every command.
def parse_records(raw: DataFrame, schema: object) -> DataFrame:
    """Types raw records by ``schema`` and names what did not parse.

    Args:
        raw: Either one JSON record per row in a ``value`` column (text lines
            of a file, or the bytes of Kafka messages with ``topic``,
            ``partition``, ``offset`` and ``timestamp``); or Avro records a
            Kafka dataset decoded (``value_record``, ``value_problem``: its
            ``avro`` option); or one column per field of ``schema`` (CSV or
            parquet files), with an optional ``_corrupt_record`` column
            holding lines that were not records.
        schema: The record's fields: a DDL string (``"device STRING NOT
            NULL, at TIMESTAMP, value DOUBLE"``) or a ``StructType``. A
            ``NOT NULL`` field is required.

    Returns:
        The fields with their types; ``raw_payload``, the record as received
        (base64 when it was not UTF-8 text); ``problems``, null when the
        record parsed, else its problems ``; ``-separated: ``empty record``,
        ``not UTF-8 text (raw_payload is base64)``, ``not a valid record``
        (not a JSON object), ``invalid <field>`` (a value that is not of its
        type) or ``missing <field>`` (a required field without a value); and
        the ``PROVENANCE_COLUMNS`` (null where they do not apply).

    Rules for text: datetimes may be ISO-8601 text or epoch milliseconds;
    integers may be written as whole floats (``"2.0"``); text fields are
    trimmed, and an empty one is null.

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
    # Fields an Avro record already holds with their type: taken as they are.
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
        *[name for name, _ in _KAFKA_ORIGIN.values()],
    )
    return parsed.withColumn("problems", _unless_empty("problems"))


def record_origin(records: DataFrame) -> Column:
    """Where a record came from, and its start: for the message of a ``fail``
    expectation. Uses the ``PROVENANCE_COLUMNS`` and ``raw_payload`` that
    ``records`` has, else the record itself as JSON.

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
        *[name for name, _ in _KAFKA_ORIGIN.values()],
    )


def _avro_records(raw: DataFrame, fields: T.StructType) -> DataFrame:
    """Avro records, decoded by the Kafka dataset (``value_record``, null with
    its ``value_problem`` when not) -> the fields, typed where the Avro type is
    the schema's, else as text to type by the rules of every path."""
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
        _avro_problem(raw).alias("_decode_problem"),
        *_origin_columns(raw),
    )


def _avro_problem(raw: DataFrame) -> Column:
    """The value's problem, else the key's (when keys are Avro too)."""
    if "key_problem" not in raw.columns:
        return F.col(AVRO_PROBLEM)
    return F.coalesce(
        F.col(AVRO_PROBLEM), F.concat(F.lit("key: "), F.col("key_problem"))
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
    """SQL that parses the text of SQL ``text`` into ``kind``, giving null
    instead of failing."""
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
        # Files often carry integer codes as floats ("1.0") where values are
        # missing.
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
                _nullable(field.dataType)
                if typed and _decoded(field.dataType)
                else T.StringType(),
            )
            for field in fields
        ]
        + [T.StructField(CORRUPT_RECORD, T.StringType())]
    )


def _nullable(kind: T.DataType) -> T.DataType:
    """``kind`` with every nested value nullable, as a decoded one is."""
    if isinstance(kind, T.StructType):
        return T.StructType(
            [T.StructField(f.name, _nullable(f.dataType)) for f in kind.fields]
        )
    if isinstance(kind, T.ArrayType):
        return T.ArrayType(_nullable(kind.elementType))
    if isinstance(kind, T.MapType):
        return T.MapType(_nullable(kind.keyType), _nullable(kind.valueType))
    return kind


def _unless_empty(name: str) -> Column:
    """A column of ``; ``-joined messages, null when there are none.

    Applied to a column made by the select before, not to the joining
    expression itself, so that Spark joins the messages once per row.
    """
    return F.when(F.col(name) != "", F.col(name)).alias(name)
