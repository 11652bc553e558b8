"""Kafka messages in Confluent's wire format (a magic byte 0, the schema's id
in 4 bytes, big-endian, then the Avro body), decoded by Spark with the writer
schema the id names and projected onto the reader schema. A query knows the ids
it was planned with: an unplanned one fails it with ``UNPLANNED_ID``'s message,
and the run plans again (:mod:`kedro_streaming._checks.avro_replans`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from kedro_streaming._connectors.avro.registry import SchemaRegistry
from kedro_streaming.errors import StreamingConfigError

# A field added to the reader schema with a default: Avro's schema resolution
# fills it in for every record that decodes, while Spark's PERMISSIVE mode
# gives a record of nulls for one that does not.
_DECODED = "kedro_streaming_decoded"
_FRAME_BYTES = 5
_SINGLE_TYPES = "boolean int long float double bytes string enum fixed".split()
UNPLANNED_ID = re.compile(r"Avro schema id (\d+) is not in the query's plan")


@dataclass(frozen=True)
class AvroSchemas:
    """What a query decodes with: the writer schema of each id it knows, the
    reader schema, and the ids the registry has no schema for."""

    registry: SchemaRegistry
    subject: str
    version: int | str
    reader: str
    writers: dict[int, str] = field(default_factory=dict)
    unknown_ids: frozenset[int] = frozenset()

    @classmethod
    def from_registry(
        cls, registry: SchemaRegistry, subject: str, version: int | str = "latest"
    ) -> AvroSchemas:
        """Every version of ``subject`` as a writer; ``version`` as the reader."""
        versions = registry.versions(subject)
        reader = registry.version(subject, version).schema
        return cls(
            registry, subject, version, reader, {r.id: r.schema for r in versions}
        )

    def with_id(self, schema_id: int) -> AvroSchemas:
        """These schemas and ``schema_id``'s (looked up again), for a new plan:
        a version registered since, or an id the registry does not have."""
        refreshed = AvroSchemas.from_registry(self.registry, self.subject, self.version)
        writers, unknown = refreshed.writers, set(self.unknown_ids)
        if schema_id not in writers:
            schema = self.registry.schema(schema_id)
            if schema is None:
                unknown.add(schema_id)
            else:
                writers[schema_id] = schema
        return replace(refreshed, writers=writers, unknown_ids=frozenset(unknown))


def decode_values(
    raw: DataFrame, schemas: AvroSchemas, column: str = "value", *, nulls: bool = False
) -> DataFrame:
    """Adds ``<column>_record`` (the record by the reader schema; null when it
    did not decode) and ``<column>_problem`` (why not; a null value is one
    unless ``nulls``)."""
    reader, is_record = _reader_schema(schemas)
    marked = reader
    if is_record:
        flag = {"name": _DECODED, "type": "boolean", "default": True}
        marked = dict(reader, fields=[*reader["fields"], flag])
    value = F.col(column)
    body = F.expr(f"substring(`{column}`, {_FRAME_BYTES + 1})")
    framed = (F.length(value) >= _FRAME_BYTES) & (
        F.substring(value, 1, 1) == F.lit(b"\x00")
    )
    # No id unless framed: bytes 2 to 5 of another message name no schema.
    schema_id = F.when(
        framed, F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("int")
    )
    options = {"mode": "PERMISSIVE", "avroSchema": json.dumps(marked)}

    planned = sorted([*schemas.writers, *schemas.unknown_ids])
    fails = framed & ~schema_id.isin(planned) if planned else framed
    unplanned = F.raise_error(
        F.concat(
            F.lit("kedro-streaming: Avro schema id "),
            schema_id.cast("string"),
            F.lit(
                " is not in the query's plan (subject "
                f"'{schemas.subject}'): the run looks it up and plans again"
            ),
        )
    )
    # One branch per writer schema; the branches exclude each other.
    decoded = F.when(fails, unplanned)
    for known_id, writer in sorted(schemas.writers.items()):
        decoded = decoded.when(schema_id == known_id, _from_avro(body, writer, options))
    raw = raw.withColumn(f"_{column}_decoded", decoded)
    record = F.col(f"_{column}_decoded")
    missing = (record[_DECODED] if is_record else record).isNull()
    problem = _problem(value, framed, schema_id, missing, schemas, nulls=nulls)
    return raw.withColumns(
        {
            f"{column}_record": (
                F.when(record[_DECODED], record.dropFields(_DECODED))
                if is_record
                else record
            ),
            f"{column}_problem": problem,
        }
    ).drop(f"_{column}_decoded")


def _reader_schema(schemas: AvroSchemas) -> tuple[Any, bool]:
    """The reader schema, and whether it is a record (else a single type)."""
    try:
        reader = json.loads(schemas.reader)
    except ValueError:
        reader = None
    is_record = isinstance(reader, dict) and reader.get("type") == "record"
    # A single type (a string key, say) decodes to null only when it fails.
    is_single = isinstance(reader, str) or (
        isinstance(reader, dict) and reader.get("type") in _SINGLE_TYPES
    )
    if not (is_record or is_single):
        raise StreamingConfigError(
            f"subject '{schemas.subject}' (version {schemas.version}) of the schema "
            f"registry at {schemas.registry.url} is neither an Avro record nor a "
            "single type (a union, an array or a map at the top): the Avro option "
            "reads those two"
        )
    return reader, is_record


def _problem(  # noqa: PLR0913 (the message's parts)
    value: Column,
    framed: Column,
    schema_id: Column,
    undecoded: Column,
    schemas: AvroSchemas,
    *,
    nulls: bool,
) -> Column:
    """Why a message did not decode, or null."""
    length = F.length(value).cast("string")
    return (
        F.when(value.isNull(), F.lit(None if nulls else "null value (a tombstone)"))
        .when(
            F.length(value) < _FRAME_BYTES,
            F.concat(
                F.lit("truncated frame: "),
                length,
                F.lit(" bytes, Confluent's wire format has at least 5"),
            ),
        )
        .when(
            ~framed,
            F.concat(
                F.lit("not in Confluent's wire format: magic byte "),
                F.conv(F.hex(F.substring(value, 1, 1)), 16, 10),
                F.lit(", 0 expected"),
            ),
        )
        .when(
            schema_id.isin(sorted(schemas.unknown_ids) or [-1]),
            F.concat(
                F.lit("unknown schema id "),
                schema_id.cast("string"),
                F.lit(f": the schema registry at {schemas.registry.url} has none"),
            ),
        )
        .when(
            undecoded,
            F.concat(
                F.lit("does not decode with its writer schema (id "),
                schema_id.cast("string"),
                F.lit(")"),
            ),
        )
    )


def _from_avro(body: Column, writer: str, options: dict[str, str]) -> Column:
    # Imported here: the module exists only with PySpark's Avro support.
    from pyspark.sql.avro.functions import from_avro  # noqa: PLC0415

    return from_avro(body, writer, options)


def value_schema(struct: StructType, name: str) -> str:
    """The Avro record schema of rows of ``struct`` (Spark's ``to_avro`` shows
    its own to no Python API); each nullable field defaults to null, so that
    one added later is a compatible change."""
    return json.dumps(_avro_type(struct, _avro_name(name)), separators=(",", ":"))


def encode_value(record: Column, schema: str, schema_id: int) -> Column:
    """``record`` in Avro by ``schema``, framed with ``schema_id``: a Kafka
    value in Confluent's wire format."""
    from pyspark.sql.avro.functions import to_avro  # noqa: PLC0415 (see _from_avro)

    header = b"\x00" + schema_id.to_bytes(4, "big")
    return F.concat(F.lit(bytearray(header)), to_avro(record, schema))


_PRIMITIVES = {
    BooleanType: "boolean",
    ByteType: "int",
    ShortType: "int",
    IntegerType: "int",
    LongType: "long",
    FloatType: "float",
    DoubleType: "double",
    StringType: "string",
    BinaryType: "bytes",
    DateType: {"type": "int", "logicalType": "date"},
    TimestampType: {"type": "long", "logicalType": "timestamp-micros"},
    TimestampNTZType: {"type": "long", "logicalType": "local-timestamp-micros"},
}


def _avro_type(data_type: DataType, name: str) -> object:
    if type(data_type) in _PRIMITIVES:
        return _PRIMITIVES[type(data_type)]
    if isinstance(data_type, DecimalType):
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": data_type.precision,
            "scale": data_type.scale,
        }
    if isinstance(data_type, ArrayType):
        items = _avro_type(data_type.elementType, name)
        return {
            "type": "array",
            "items": ["null", items] if data_type.containsNull else items,
        }
    if isinstance(data_type, MapType) and isinstance(data_type.keyType, StringType):
        values = _avro_type(data_type.valueType, name)
        return {
            "type": "map",
            "values": ["null", values] if data_type.valueContainsNull else values,
        }
    if isinstance(data_type, StructType):
        fields = []
        for spark_field in data_type.fields:
            avro = _avro_type(spark_field.dataType, f"{name}_{spark_field.name}")
            fields.append(
                {"name": spark_field.name, "type": ["null", avro], "default": None}
                if spark_field.nullable
                else {"name": spark_field.name, "type": avro}
            )
        return {"type": "record", "name": name, "fields": fields}
    raise StreamingConfigError(
        f"a field of type {data_type.simpleString()} has no Avro type (maps need "
        "string keys): cast it, e.g. to a string, in the node"
    )


def _avro_name(text: str) -> str:
    """An Avro name from a topic's: letters, digits and _ only."""
    name = re.sub(r"\W", "_", text, flags=re.ASCII)
    return name if re.match(r"[A-Za-z_]", name) else f"_{name}"
