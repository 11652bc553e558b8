"""Streaming sources and sinks as catalog entries: ``SparkStreamingDataset``,
a shell over the connector of its format."""

from __future__ import annotations

import inspect
import itertools
import json
from typing import Any

import fsspec
from kedro.io import AbstractDataset
from kedro.io.core import DatasetError
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructType

from kedro_streaming._connectors.avro.option import AvroOption
from kedro_streaming._connectors.base import ROWS_READ_METRIC, ROWS_WRITTEN_METRIC
from kedro_streaming._connectors.entry_keys import (
    credentials_unread,
    entry_problems,
    redact,
    secrets_in,
)
from kedro_streaming._connectors.registry import connector_for
from kedro_streaming._connectors.sink_args import SinkArgs
from kedro_streaming._connectors.streams import read_stream, start_query
from kedro_streaming._session.session import spark_session
from kedro_streaming.problems import Problem

_LOADS = itertools.count()


class SparkStreamingDataset(AbstractDataset[DataFrame, DataFrame]):
    """Loads a streaming DataFrame, or starts a streaming query that saves one.

    Saving starts the query and returns at once (``start()``: with a trigger
    and query name of the caller's); the project's hooks watch it.

    Example:
        ```yaml
        raw_trips:
          type: kedro_streaming.SparkStreamingDataset
          filepath: data/01_raw/trips_landing
          file_format: text          # JSON lines: parse_records decodes them
        bronze_trips:
          type: kedro_streaming.SparkStreamingDataset
          filepath: data/02_intermediate/bronze_trips
          file_format: parquet
          save_args:
            output_mode: append
            checkpoint: data/checkpoints/bronze_trips
            trigger: {processingTime: 10 seconds}
        ```
    """

    def __init__(
        self,
        *,
        filepath: str = "",
        file_format: str = "",
        load_args: dict[str, Any] | None = None,
        save_args: dict[str, Any] | None = None,
        credentials: dict[str, Any] | None = None,
        avro: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        **unknown: Any,
    ) -> None:
        """Creates a new streaming dataset.

        Args:
            filepath: Folder of a file source or sink; empty for Kafka.
            file_format: Any Spark streaming format: json, csv, parquet, kafka,
                delta; console or memory to debug.
            load_args: Options of ``spark.readStream``; ``schema`` (DDL, or
                ``{"filepath": ...}`` of a Spark JSON schema); ``keep_watermark:
                true`` keeps the mark of the stream that wrote a table read back.
            save_args: ``output_mode``, ``checkpoint``, ``trigger`` (keyword
                arguments of ``DataStreamWriter.trigger``), ``query_name``,
                ``partitionBy``, ``foreach_batch`` (``"module:function"``),
                ``merge_on`` (key columns: each micro-batch is upserted into
                the Delta table at ``filepath``, exactly once), ``changes``
                (a Delta table kept from a change feed: docs/cdc.md); the rest
                are writer options.
            credentials: Kafka's security settings (credentials.yml).
            avro: Kafka values in Avro, in Confluent's wire format, and their
                registry: ``schema_registry_url``, ``subject`` (default
                ``<topic>-value``), ``version`` (a source's reader schema,
                default ``latest``), ``key_subject`` (Avro keys too),
                ``credentials`` (the registry's ``username`` and ``password``).
            metadata: Ignored by Kedro; free for users and plugins.
            unknown: Any other key: a mistake, which ``key_problems`` names.
        """
        self._unknown_keys = list(unknown)
        self.path = str(filepath) if filepath else None
        self.file_format = file_format
        self.connector = connector_for(file_format)
        self.credentials = dict(credentials or {})
        self.metadata = metadata
        self._load_args = dict(load_args or {})
        schema = self._load_args.pop("schema", None)
        self._keep_watermark = self._load_args.pop("keep_watermark", False)
        self.schema = _schema_from_file(schema) if isinstance(schema, dict) else schema
        self._save_args = dict(save_args or {})
        self.sink = SinkArgs.parse(self._save_args)
        self.avro = AvroOption(avro, self._load_args) if avro else None
        self.query: StreamingQuery | None = None
        self._started_from: DataFrame | None = None
        # The save_args a sink's query reads: the run-level code reads these.
        self.checkpoint, self.trigger = self.sink.checkpoint, self.sink.trigger
        self.output_mode, self.real_time = self.sink.output_mode, self.sink.real_time
        self.foreach_batch = self.sink.foreach_batch
        self.partition_by = self.sink.partition_by
        # Its name in the catalog, which the run sets (a dataset is not told):
        # a source's name in its query's checkpoint, when Spark names them.
        self.catalog_name: str | None = None

    @property
    def load_options(self) -> dict[str, Any]:
        """The reader's options from ``load_args`` (credentials not included)."""
        return dict(self._load_args)

    @property
    def writer_options(self) -> dict[str, Any]:
        """The writer's options from ``save_args`` (credentials not included)."""
        return dict(self.sink.writer_options)

    def key_problems(self) -> list[Problem]:
        """The entry's keys it does not take, and the plugin's keys misspelt
        in its load_args and save_args (Spark would ignore them)."""
        return entry_problems(
            self._unknown_keys,
            _ENTRY_KEYS,
            self._load_args,
            self.sink.writer_options,
            self._keep_watermark,
        )

    def sink_problems(self) -> list[Problem]:
        """What keeps this dataset from being saved, before any query starts;
        a misspelt key is the one problem named (what else is missing follows)."""
        return self.key_problems() or (
            self.sink.problems(self.connector, self.path)
            + self.connector.sink_problems(self)
            + secrets_in(self.sink.writer_options, "save_args")
            + credentials_unread(self.connector, self.credentials)
        )

    def data_problems(self, data: DataFrame) -> list[Problem]:
        """What keeps this sink from writing ``data``, before its query starts."""
        return self.connector.data_problems(self, data)

    def source_problems(self) -> list[Problem]:
        """What keeps this dataset from being read, before any query starts
        (for a source no query of the run writes)."""
        return self.key_problems() or (
            secrets_in(self._load_args, "load_args")
            + credentials_unread(self.connector, self.credentials)
            + self.connector.source_problems(self)
        )

    def _describe(self) -> dict[str, Any]:
        return {
            "filepath": self.path,
            "file_format": self.file_format,
            "load_args": redact(self._load_args),
            "save_args": redact(self._save_args),
            "credentials": "***" if self.credentials else None,
            "avro": redact(self.avro.options) if self.avro else None,
        }

    def load(self) -> DataFrame:
        return self.stream()

    def stream(self, schema: StructType | None = None) -> DataFrame:
        """A streaming DataFrame over the source, with ``schema`` or its own
        (else a folder's committed files', see ``read_stream``)."""
        # What this process's query writes holds every committed column
        # (check_sink_schema refuses any other) and those it adds.
        written = self._started_from is not None and self.connector.self_describing
        frame = read_stream(
            spark_session(),
            self.connector,
            self.path,
            {**self._load_args, **self.connector.spark_options(self)},
            schema or self.schema,
            written_schema=self._started_from.schema if written else None,
            keep_watermark=self._keep_watermark is True,
            name=self.catalog_name,
        ).observe(f"{ROWS_READ_METRIC}:{next(_LOADS)}", F.count(F.lit(1)).alias("rows"))
        return frame if self.avro is None else self.avro.decode(frame)

    def save(self, data: DataFrame) -> None:
        """Starts a query that writes ``data``, unless ``start()`` did."""
        query = self.query
        if query is None or not query.isActive or self._started_from is not data:
            self.start(data)

    def start(
        self,
        data: DataFrame,
        *,
        trigger: dict[str, Any] | None = None,
        query_name: str | None = None,
    ) -> StreamingQuery:
        """Starts a streaming query that writes ``data`` (a streaming
        DataFrame), with ``trigger`` (``DataStreamWriter.trigger``'s keyword
        arguments) and ``query_name``, by default those of ``save_args``."""
        if not data.isStreaming:
            raise DatasetError(
                "SparkStreamingDataset saves streaming DataFrames only; use "
                "SparkDataset for batch DataFrames."
            )
        problems = self.sink_problems() + self.data_problems(data)
        if problems:
            raise DatasetError(f"Streaming sink {problems[0]}.")
        # File sinks do not report how many rows they write; this does, for all.
        observed = self.connector.encode(self, data).observe(
            ROWS_WRITTEN_METRIC, F.count(F.lit(1)).alias("rows")
        )
        self.query = start_query(
            self,
            observed,
            {**self.sink.writer_options, **self.connector.spark_options(self)},
            trigger=trigger or self.sink.trigger,
            query_name=query_name or self.sink.query_name,
            upserted=data,
        )
        self._started_from = data
        return self.query

    def _exists(self) -> bool:
        if not self.path:
            return True
        try:
            self.load()
        except DatasetError:
            return False
        return True


def _schema_from_file(schema: dict[str, Any]) -> StructType:
    """A Spark schema saved as JSON (``StructType.json()``), local or remote."""
    if "filepath" not in schema:
        raise DatasetError(
            "A `schema` given as a mapping needs `filepath`: the path of a Spark "
            "JSON schema file."
        )
    with fsspec.open(schema["filepath"], **schema.get("credentials", {})) as handle:
        return StructType.fromJson(json.load(handle))


# The keys a catalog entry may have: SparkStreamingDataset's arguments.
_ENTRY_KEYS = tuple(
    name
    for name, parameter in inspect.signature(
        SparkStreamingDataset.__init__
    ).parameters.items()
    if parameter.kind is inspect.Parameter.KEYWORD_ONLY
)
