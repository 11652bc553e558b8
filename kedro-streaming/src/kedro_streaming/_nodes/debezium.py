"""Debezium's change events as changes a Delta sink keeps (``changes:``)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kedro_streaming._nodes.records import (
    AVRO_PROBLEM,
    AVRO_RECORD,
    PROVENANCE_COLUMNS,
    _struct,
    parse_records,
    sql_name,
)

# Debezium's operations: create, update, delete, read (a snapshot's row).
OPERATIONS = ("c", "u", "d", "r")
_OTHER_OPERATIONS = {"t": "truncate", "m": "message"}
_TEXT_MAP = "MAP<STRING, STRING>"
_EVENT, _PROBLEM = "_event", "_event_problem"
_ENVELOPE_FIELDS = ("payload", "op", "before", "after", "source")


def debezium_changes(
    raw: DataFrame, schema: object, sequence: str = "source.lsn BIGINT"
) -> DataFrame:
    """Debezium's change events, one per row of ``raw`` (JSON in ``value``,
    with or without its ``schema``/``payload`` envelope; or the Avro record a
    Kafka dataset decoded), as changes: the row's fields typed by ``schema``
    (from ``after``; ``before`` for a delete), ``_op`` (``c``, ``u``, ``d``,
    or ``r`` for a snapshot's row), one column per ``sequence`` field named
    ``_<field>`` (``source.lsn`` -> ``_lsn``), Kafka's provenance columns,
    ``raw_payload`` (the event) and ``problems``: null, or why the change
    cannot be applied (a tombstone, not a change event, an operation other
    than those four, no image, a missing sequence, a field's own problem).

    ``schema`` is DDL or a ``StructType``; mark the keys ``NOT NULL``.
    ``sequence``: ``<field> <type>`` pairs, comma-separated, from the event's
    ``source`` block (``source.lsn``) or its top level (``ts_ms``).

    Example:
        >>> from kedro_streaming import debezium_changes
        >>> events = spark.createDataFrame(
        ...     [('{"op": "u", "after": {"id": 7, "name": "Ana"}, '
        ...       '"source": {"lsn": 120}}',),
        ...      ('{"op": "d", "before": {"id": 7, "name": "Ana"}, '
        ...       '"source": {"lsn": 130}}',),
        ...      (None,)],
        ...     "value STRING",
        ... )
        >>> changes = debezium_changes(events, "id INT NOT NULL, name STRING")
        >>> changes.select("id", "name", "_op", "_lsn", "problems").collect()
        [Row(id=7, name='Ana', _op='u', _lsn=120, problems=None),
         Row(id=7, name='Ana', _op='d', _lsn=130, problems=None),
         Row(id=None, name=None, _op=None, _lsn=None,
             problems='tombstone (the delete event before it applied the change)')]
    """
    fields = _struct(schema)
    paths = _sequence_fields(sequence)
    if AVRO_RECORD in raw.columns:
        text = F.to_json(F.col(AVRO_RECORD))
        undecoded = F.col(AVRO_PROBLEM)
    else:
        text = F.col("value").cast("string")
        undecoded = F.lit(None).cast("string")
    # One JSON decode of the event into a struct whose images and source
    # are maps (an enveloped event's payload decoded once more). Each decode
    # is under an always-true test of the partition's id, which Spark counts
    # as nondeterministic (rand() >= 0 it simplifies): it keeps the
    # projection whole, where Spark would copy the decode into every column
    # reading it (from_json runs outside generated code, once per reference)
    # and push a filter on the result (`problems IS NULL`) below it (5.5 s
    # against 0.8 s for 20,000 events, one decode per field).
    origin = [
        c for c in ("topic", "partition", "offset", "timestamp") if c in raw.columns
    ]
    envelope = _envelope_type(paths)
    steps = raw.select(
        text.alias(_EVENT),
        undecoded.alias("_undecoded"),
        _once(F.from_json(text, envelope)).alias("_top"),
        *origin,
    )
    steps = steps.select(
        "*",
        _once(
            F.coalesce(F.from_json(F.col("_top.payload"), envelope), F.col("_top"))
        ).alias("_envelope"),
    )
    steps = steps.select(
        "*",
        F.col("_envelope.op").alias("_op"),
        F.col("_envelope.source").alias("_source"),
        F.when(F.col("_envelope.op") == "d", F.col("_envelope.before"))
        .otherwise(F.col("_envelope.after"))
        .alias("_image"),
    )
    op, image = F.col("_op"), F.col("_image")
    columns = [image[f.name].alias(f.name) for f in fields]
    columns += [
        (
            F.col("_source")[path[7:]]
            if path.startswith("source.")
            else F.col("_envelope")[path]
        ).alias(name)
        for path, name, _ in paths
    ]
    problem = (
        F.when(F.col("_undecoded").isNotNull(), F.col("_undecoded"))
        .when(
            F.col(_EVENT).isNull(),
            F.lit("tombstone (the delete event before it applied the change)"),
        )
        .when(op.isNull(), F.lit("not a Debezium change event"))
        .when(~op.isin(*OPERATIONS), _unsupported(op))
        .when(
            image.isNull(),
            F.concat(
                F.lit("no "),
                F.when(op == "d", "before").otherwise("after"),
                F.lit(" image"),
            ),
        )
    )
    events = steps.select(*columns, op, F.col(_EVENT), problem.alias(_PROBLEM), *origin)
    typed = ", ".join(
        [f"{sql_name(name)} {kind} NOT NULL" for _, name, kind in paths]
        + [f"_op STRING, {_EVENT} STRING, {_PROBLEM} STRING"]
    )
    parsed = parse_records(events, _struct(f"{_ddl(fields)}, {typed}"))
    own = F.col("problems")
    for path, name, _ in paths:
        own = F.regexp_replace(own, f"missing {name}", f"missing sequence {path}")
    return parsed.select(
        *[sql_name(f.name) for f in fields],
        "_op",
        *[sql_name(name) for _, name, _ in paths],
        *PROVENANCE_COLUMNS[1:],
        F.col(_EVENT).alias("raw_payload"),
        F.coalesce(F.col(_PROBLEM), own).alias("problems"),
    )


def _once(decoded):
    """``decoded``, kept in its own projection (see ``debezium_changes``)."""
    return F.when(F.spark_partition_id() >= 0, decoded)


def _envelope_type(paths: list[tuple[str, str, str]]) -> str:
    """The event's struct: its images and source as maps of text, an
    enveloped event's payload as text, and each top-level sequence field."""
    top = [
        f"{sql_name(path)}: STRING"
        for path, _, _ in paths
        if not path.startswith("source.") and path not in _ENVELOPE_FIELDS
    ]
    return (
        f"STRUCT<payload: STRING, op: STRING, before: {_TEXT_MAP}, "
        f"after: {_TEXT_MAP}, source: {_TEXT_MAP}{''.join(', ' + t for t in top)}>"
    )


def _sequence_fields(sequence: str) -> list[tuple[str, str, str]]:
    """``"source.lsn BIGINT, ts_ms BIGINT"`` -> (path, column, type) each."""
    fields = []
    for part in sequence.split(","):
        path, _, kind = part.strip().partition(" ")
        if not path or not kind.strip():
            raise ValueError(
                f"debezium_changes: sequence {sequence!r} is not a list of "
                "`<field> <type>` pairs, e.g. 'source.lsn BIGINT'"
            )
        fields.append((path, "_" + path.rsplit(".", 1)[-1], kind.strip()))
    return fields


def _unsupported(op):
    named = F.lit(None).cast("string")
    for code, name in _OTHER_OPERATIONS.items():
        named = F.when(op == code, F.lit(f" ({name})")).otherwise(named)
    return F.concat(
        F.lit("unsupported operation '"), op, F.lit("'"), F.coalesce(named, F.lit(""))
    )


def _ddl(fields) -> str:
    return ", ".join(
        f"{sql_name(f.name)} {f.dataType.simpleString()}"
        + ("" if f.nullable else " NOT NULL")
        for f in fields
    )
