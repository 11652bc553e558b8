"""A streaming entry's reader and writer: ``spark.readStream`` over a source,
and the query that writes a sink."""

from __future__ import annotations

import importlib
import re
from typing import Any

from kedro.io.core import DatasetError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType
from pyspark.sql.utils import AnalysisException

from kedro_streaming._connectors.base import Connector, Entry
from kedro_streaming._spark import with_trigger

# Spark's settings that let a query add or remove a source over its state
# (Spark 4.2): every source named, and offsets logged by name.
SOURCE_EVOLUTION = "spark.sql.streaming.queryEvolution.enableSourceEvolution"
OFFSET_LOG_FORMAT = "spark.sql.streaming.offsetLog.formatVersion"


def source_name(name: str) -> str:
    """A catalog name as Spark takes a source's name (letters, digits, ``_``).

    Example:
        >>> source_name("zones@changes"), source_name("raw.trips")
        ('zones_changes', 'raw_trips')
    """
    return re.sub(r"\W", "_", name, flags=re.ASCII)


def names_sources(spark: SparkSession) -> bool:
    """Whether the session's queries name their sources (``SOURCE_EVOLUTION``)."""
    return spark.conf.get(SOURCE_EVOLUTION, "false").strip().lower() == "true"


# Spark's causes for a source that holds nothing to stream yet.
_NOTHING_YET = ("PATH_NOT_FOUND", "UNABLE_TO_INFER_SCHEMA", "DELTA_SCHEMA_NOT_SET")


def read_stream(  # noqa: PLR0913 (a source's parts)
    spark: SparkSession,
    connector: Connector,
    path: str | None,
    options: dict[str, Any],
    schema: StructType | str | None,
    *,
    written_schema: StructType | None = None,
    keep_watermark: bool = False,
    name: str | None = None,
) -> DataFrame:
    """A streaming DataFrame over a source, without its writer's watermark mark
    (no query reading it advances it) unless ``keep_watermark``.

    Without a ``schema``, a folder takes its committed files' (merged) schema,
    as the batch reader follows the sink's log; ``written_schema`` (what this
    process writes there) wins over it. ``name``: the source's catalog name,
    its name in the checkpoint when the session names sources.
    """
    file_format = connector.file_format
    reader = spark.readStream.format(file_format).options(**options)
    if names_sources(spark):
        reader = reader.name(source_name(name or path or file_format))
    if connector.keeps_schema:
        schema = None  # the table carries its own; Spark refuses another
    try:
        if schema is None and path and connector.takes_schema:
            # Read even when this process writes it: no files, nothing to stream.
            batch = spark.read.format(file_format)
            if connector.self_describing:
                batch = batch.option("mergeSchema", "true")
            committed = batch.load(path).schema
            schema = written_schema or committed
        if schema is not None:
            if isinstance(schema, StructType) and not keep_watermark:
                schema = without_watermark(schema)
            reader = reader.schema(schema)
        frame = reader.load(path) if path else reader.load()
    except AnalysisException as exc:
        if not any(cause in str(exc) for cause in _NOTHING_YET):
            raise
        or_schema = (
            ""
            if connector.keeps_schema
            else ", or give the source a `schema` in its load_args"
        )
        raise DatasetError(
            f"There is nothing to stream from '{path}' yet: it holds no "
            f"{file_format} files. Run the pipeline that writes it "
            f"first{or_schema}."
        ) from None
    # A Delta table carries its writer's schema, metadata included.
    return frame if keep_watermark else drop_watermark(frame)


def drop_watermark(frame: DataFrame) -> DataFrame:
    """``frame`` without Spark's watermark mark on any column."""
    for field in frame.schema.fields:
        if WATERMARK_KEY in field.metadata:
            kept = {k: v for k, v in field.metadata.items() if k != WATERMARK_KEY}
            frame = frame.withMetadata(field.name, kept)
    return frame


# Spark's metadata key for a column's watermark delay.
WATERMARK_KEY = "spark.watermarkDelayMs"


def without_watermark(schema: StructType) -> StructType:
    """``schema`` without Spark's watermark mark on any column.

    Example:
        >>> from pyspark.sql.types import StructField, TimestampType
        >>> marked = StructField("at", TimestampType(), metadata={WATERMARK_KEY: 600000})
        >>> without_watermark(StructType([marked])).fields[0].metadata
        {}
    """
    return StructType(
        [
            StructField(
                field.name,
                field.dataType,
                field.nullable,
                {k: v for k, v in field.metadata.items() if k != WATERMARK_KEY},
            )
            for field in schema.fields
        ]
    )


def as_nullable(data_type: DataType) -> DataType:
    """``data_type`` with every field, element and value nullable, at any
    depth: as a DataFrame's write makes a new table."""
    if isinstance(data_type, StructType):
        return StructType(
            [StructField(f.name, as_nullable(f.dataType), True) for f in data_type]
        )
    if isinstance(data_type, ArrayType):
        return ArrayType(as_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(
            as_nullable(data_type.keyType), as_nullable(data_type.valueType), True
        )
    return data_type


def start_query(
    entry: Entry,
    data: DataFrame,
    options: dict[str, Any],
    *,
    trigger: dict[str, Any] | None,
    query_name: str | None,
    upserted: DataFrame,
) -> StreamingQuery:
    """Starts the query that writes ``data`` (encoded, observed) to a sink;
    ``upserted``: the node's DataFrame, whose schema a ``merge_on`` table takes."""
    sink = entry.sink
    writer = data.writeStream.outputMode(sink.output_mode).option(
        "checkpointLocation", sink.checkpoint
    )
    writer = entry.connector.writer(entry, writer).options(**options)
    if entry.file_format:
        writer = writer.format(entry.file_format)
    if query_name:
        writer = writer.queryName(query_name)
    if trigger:
        writer = with_trigger(writer, trigger)
    if columns := sink.partition_by:
        writer = writer.partitionBy(
            *([columns] if isinstance(columns, str) else columns)
        )
    if sink.foreach_batch:
        writer = writer.foreachBatch(_import_function(sink.foreach_batch))
    return entry.connector.start(entry, writer, upserted)


def _import_function(reference: str):
    module_name, _, function_name = reference.partition(":")
    try:
        return getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise DatasetError(
            f"foreach_batch '{reference}' does not name a function: write it as "
            "'package.module:function'."
        ) from exc
