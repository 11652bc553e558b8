"""Streaming sources and sinks as catalog entries: ``SparkStreamingDataset``,
which composes the connectors."""

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

from kedro_streaming._connectors.avro import (
    AvroSchemas,
    decode_values,
)
from kedro_streaming._connectors.avro_option import AvroOption
from kedro_streaming._connectors.entry_keys import (
    misspelt_args,
    redact,
    secrets_in,
    unknown_key_problems,
)
from kedro_streaming._connectors.files import (
    SELF_DESCRIBING_FORMATS,
    file_source_problems,
)
from kedro_streaming._connectors.kafka import (
    encode_values,
    kafka_data_problems,
    kafka_sink_problems,
    kafka_source_problems,
)
from kedro_streaming._connectors.kafka_security import KafkaSecurity
from kedro_streaming._connectors.sink_args import SinkArgs
from kedro_streaming._connectors.streams import (
    SCHEMA_FREE_FORMATS,
    read_stream,
    start_query,
)

# Every sink counts the rows it writes under this name, in the query's progress.
ROWS_WRITTEN_METRIC = "rows_written"
# Every source counts the rows it reads under a name that starts so (one per
# load: a query may read two sources, or one twice). Spark's numInputRows
# counts what its reader hands on, which for parquet is after the query's
# filters skipped row groups: not what the query read.
ROWS_READ_METRIC = "rows_read"
_LOADS = itertools.count()


class SparkStreamingDataset(AbstractDataset[DataFrame, DataFrame]):
    """Loads a streaming DataFrame, or starts a streaming query that saves one.

    Saving starts the query and returns at once; the project's hooks watch it.
    ``start()`` is the same with a trigger and query name chosen by the caller
    (the hooks pass the run's). Credentials are merged into the options and
    never described or logged.

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
            file_format: Any Spark streaming format: json, csv, parquet, kafka...
            load_args: Options of ``spark.readStream``; ``schema`` is a DDL string
                or ``{"filepath": ...}`` naming a Spark JSON schema file;
                ``keep_watermark: true`` keeps the watermark mark of the stream
                that wrote a table read back (dropped by default: no query
                reading it advances it).
            save_args: ``output_mode``, ``checkpoint``, ``trigger`` (keyword
                arguments of ``DataStreamWriter.trigger``), ``query_name``,
                ``partitionBy``, ``foreach_batch`` (``"module:function"``),
                ``merge_on`` (key columns: each micro-batch is upserted into
                the Delta table at ``filepath``, exactly once); the rest are
                writer options.
            credentials: Options merged into both reader and writer, e.g. Kafka
                SASL settings from ``conf/<env>/credentials.yml``.
            avro: Kafka values in Avro, in Confluent's wire format:
                ``schema_registry_url``; ``subject`` (default
                ``<topic>-value``); ``version``, a source's reader schema
                (default ``latest``); ``key_subject``, for a source whose keys
                are Avro too (``key_record``, ``key_problem``; no key is no
                problem); ``credentials``, the registry's ``username`` and
                ``password``. A source decodes each message with the schema
                its id names into ``value_record`` (by the reader schema), or
                gives ``value_problem``; a sink encodes a
                struct ``value`` with a schema derived from it, registered at
                start (see ``encode_values``).
            metadata: Ignored by Kedro; free for users and plugins.
            unknown: Any other key of the catalog entry: a mistake, which
                ``key_problems`` names before any query starts.
        """
        self._unknown_keys = list(unknown)
        self._path = str(filepath) if filepath else None
        self._file_format = file_format
        self._credentials = dict(credentials or {})
        self.metadata = metadata

        self._load_args = dict(load_args or {})
        schema = self._load_args.pop("schema", None)
        self._keep_watermark = self._load_args.pop("keep_watermark", False)
        self._schema = _schema_from_file(schema) if isinstance(schema, dict) else schema

        self._save_args = dict(save_args or {})
        self._sink = SinkArgs.parse(self._save_args)
        self._query: StreamingQuery | None = None
        self._started_from: DataFrame | None = None
        self._avro = AvroOption(avro, self._load_args) if avro else None

    @property
    def query(self) -> StreamingQuery | None:
        """The query this dataset started last, if any."""
        return self._query

    @property
    def trigger(self) -> dict[str, Any] | None:
        """The trigger of ``save_args``, if any: ``start()`` may be given another."""
        return self._sink.trigger

    @property
    def load_options(self) -> dict[str, Any]:
        """The reader's options from ``load_args`` (credentials not included)."""
        return dict(self._load_args)

    @property
    def foreach_batch(self) -> str | None:
        """The ``foreach_batch`` function that writes each micro-batch, if any."""
        return self._sink.foreach_batch

    @property
    def writer_options(self) -> dict[str, Any]:
        """The writer's options from ``save_args`` (credentials not included)."""
        return dict(self._sink.writer_options)

    @property
    def credential_keys(self) -> list[str]:
        """The names of the options the credentials add (never their values)."""
        return list(self.kafka_options)

    @property
    def real_time(self) -> bool:
        """Whether its query runs in Real-Time Mode (a ``realTime`` trigger)."""
        return self._sink.real_time

    @property
    def checkpoint(self) -> str | None:
        """Where the query that saves this dataset keeps its progress."""
        return self._sink.checkpoint

    @property
    def output_mode(self) -> str:
        """How the query writes: append, update or complete."""
        return self._sink.output_mode

    @property
    def file_format(self) -> str:
        """The Spark format, e.g. ``parquet`` or ``kafka``."""
        return self._file_format

    @property
    def path(self) -> str | None:
        """The folder of a file source or sink, ``None`` for Kafka."""
        return self._path

    @property
    def partition_by(self) -> str | list[str] | None:
        """The sink's ``partitionBy`` columns, if any."""
        return self._sink.partition_by

    def key_problems(self) -> list[str]:
        """Names each key of the entry that it does not take, and each key of
        save_args or load_args that is not the plugin's but close to one of
        its keys (``checkpiont``): Spark would take it for an option and
        ignore it. Other unknown keys of those are Spark's to check."""
        return (
            unknown_key_problems(self._unknown_keys, _ENTRY_KEYS)
            + [
                f"has `{key}` in its {args_name}: did you mean `{match}`?"
                for args_name, key, match in self._misspelt_args()
            ]
            + (
                []
                if isinstance(self._keep_watermark, bool)
                else [
                    f"has `keep_watermark: {self._keep_watermark}` in its "
                    "load_args: use true or false"
                ]
            )
        )

    @property
    def misspelt_keys(self) -> set[str]:
        """The keys of load_args and save_args that ``key_problems`` names:
        the plugin's keys misspelt, not Spark options."""
        return {key for _, key, _ in self._misspelt_args()}

    def _misspelt_args(self) -> list[tuple[str, str, str]]:
        return misspelt_args(self._load_args, self._sink.writer_options)

    def sink_problems(self) -> list[str]:
        """Says what keeps this dataset from being saved, before any query starts.

        A misspelt key (``key_problems``) is the one problem named: what else
        is missing follows from it."""
        problems = self.key_problems()
        if problems:
            return problems
        problems = self._sink.problems(self._file_format, self._path)
        if self._file_format == "kafka":
            problems += kafka_sink_problems(
                {**self._sink.writer_options, **self.kafka_options}
            )
        return problems + secrets_in(self._sink.writer_options, "save_args")

    def data_problems(self, data: DataFrame) -> list[str]:
        """Says what keeps this sink from writing ``data``, before its query starts."""
        if self._file_format == "kafka" and not self._sink.foreach_batch:
            return kafka_data_problems(data, self._sink.writer_options.get("topic"))
        return []

    def source_problems(self) -> list[str]:
        """Says what keeps this dataset from being read, before any query starts.

        Only for sources that no query of the same run writes. A misspelt
        key (``key_problems``) is the one problem named.
        """
        problems = self.key_problems()
        if problems:
            return problems
        problems = secrets_in(self._load_args, "load_args")
        if self._file_format == "kafka":
            return problems + kafka_source_problems(
                {**self._load_args, **self.kafka_options}
            )
        if self._file_format in ("rate", "socket"):
            return problems
        return problems + file_source_problems(
            self._file_format,
            self._path,
            has_schema=self._schema is not None
            or self._file_format in SCHEMA_FREE_FORMATS,
        )

    @property
    def kafka_client_config(self) -> dict[str, str]:
        """The Kafka client settings Spark derives from the ``kafka.*`` options.

        Secrets included: for connection checks, never for display.
        """
        options = {**self._load_args, **self._sink.writer_options, **self.kafka_options}
        return {
            key.removeprefix("kafka."): str(value)
            for key, value in options.items()
            if key.startswith("kafka.")
        }

    @property
    def kafka_security(self) -> KafkaSecurity:
        """The security settings of every client of this dataset's brokers:
        its credentials, and any ``kafka.ssl.*`` option of its arguments."""
        return KafkaSecurity(
            {
                key: value
                for key, value in {
                    **self._load_args,
                    **self._sink.writer_options,
                }.items()
                if key.startswith("kafka.")
            }
            | self._credentials
        )

    @property
    def kafka_python_config(self) -> dict[str, Any]:
        """The same settings as kafka-python's client arguments, for the
        runtime's own calls to the brokers (topic checks, ``status``' lag, the
        Real-Time Mode check). Secrets included: never for display."""
        return {
            "bootstrap_servers": self.kafka_client_config.get("bootstrap.servers"),
            **self.kafka_security.kafka_python(),
        }

    @property
    def kafka_options(self) -> dict[str, str]:
        """Spark Kafka options from the credentials, secrets included.

        Credentials are Spark options (``kafka.ssl.truststore.location``...)
        and the short keys ``security_protocol``, ``sasl_mechanism``,
        ``username`` and ``password`` (see :mod:`kedro_streaming._connectors.kafka_security`).
        """
        return KafkaSecurity(self._credentials).spark_options()

    @property
    def reads_avro(self) -> bool:
        """Whether its values are decoded from Avro (the ``avro`` option)."""
        return self._avro is not None

    @property
    def writes_avro(self) -> bool:
        """Whether its struct values are encoded as Avro (the ``avro`` option)."""
        return self._avro is not None and self._file_format == "kafka"

    @property
    def avro_schemas(self) -> AvroSchemas:
        """The schemas its values decode with (see ``AvroOption``)."""
        return self._avro.schemas

    @property
    def avro_key_schemas(self) -> AvroSchemas | None:
        """The schemas its keys decode with, if keys are Avro."""
        return self._avro.key_schemas

    def check_registry(self) -> None:
        """Fails unless the ``avro`` option's registry answers, its
        credentials accepted."""
        self._avro.registry().subjects()

    def plan_avro_id(self, schema_id: int) -> None:
        """Looks ``schema_id`` up for the next ``load`` (see ``AvroOption``)."""
        self._avro.plan_id(schema_id)

    def encode_values(self, data: DataFrame) -> DataFrame:
        """``data`` as the Kafka sink writes it (see ``kafka.encode_values``)."""
        if self._file_format != "kafka":
            return data
        return encode_values(data, self._sink.writer_options.get("topic"), self._avro)

    def _describe(self) -> dict[str, Any]:
        return {
            "filepath": self._path,
            "file_format": self._file_format,
            "load_args": redact(self._load_args),
            "save_args": redact(self._save_args),
            "credentials": "***" if self._credentials else None,
            "avro": redact(self._avro.options) if self._avro else None,
        }

    def load(self) -> DataFrame:
        """Returns a streaming DataFrame over the source (see ``stream``)."""
        return self.stream()

    def stream(self, schema: StructType | None = None) -> DataFrame:
        """Returns a streaming DataFrame over the source.

        Without a ``schema`` (an argument, or the dataset's own), a folder takes
        the schema of its committed files: Spark's batch reader follows a file
        sink's ``_spark_metadata`` log, whereas streaming inference would also
        open files of a batch still being written. Parquet and ORC footers are
        merged, so that a column added by a later run is read (null in older
        files); a sink this process writes is read with the schema it writes.
        """
        schema = schema or self._schema
        if self._started_from is not None and self._file_format in (
            SELF_DESCRIBING_FORMATS
        ):
            # What this process's query writes holds every committed column
            # (check_sink_schema refuses any other) and those it adds.
            written = self._started_from.schema
        else:
            written = None
        frame = read_stream(
            self._file_format,
            self._path,
            {**self._load_args, **self.kafka_options},
            schema,
            written_schema=written,
            keep_watermark=self._keep_watermark is True,
        ).observe(f"{ROWS_READ_METRIC}:{next(_LOADS)}", F.count(F.lit(1)).alias("rows"))
        if self._avro is not None:
            frame = decode_values(frame, self.avro_schemas)
            if self.avro_key_schemas is not None:
                frame = decode_values(frame, self.avro_key_schemas, "key", nulls=True)
        return frame

    def save(self, data: DataFrame) -> None:
        """Starts a streaming query that writes ``data``, unless one already does.

        A DataFrame passed to ``start()`` first (as the hooks do) is not started
        twice.
        """
        query = self._query
        if query is not None and query.isActive and self._started_from is data:
            return
        self.start(data)

    def start(
        self,
        data: DataFrame,
        *,
        trigger: dict[str, Any] | None = None,
        query_name: str | None = None,
    ) -> StreamingQuery:
        """Starts a streaming query that writes ``data`` to this dataset.

        Args:
            data: A streaming DataFrame.
            trigger: Keyword arguments of ``DataStreamWriter.trigger``; by
                default the ``trigger`` of ``save_args``, else Spark's.
            query_name: By default the ``query_name`` of ``save_args``.

        Returns:
            The started query.
        """
        if not data.isStreaming:
            raise DatasetError(
                "SparkStreamingDataset saves streaming DataFrames only; use "
                "SparkDataset for batch DataFrames."
            )
        problems = self.sink_problems() + self.data_problems(data)
        if problems:
            raise DatasetError(f"Streaming sink {problems[0]}.")

        # File sinks do not report how many rows they write; this does, for all.
        observed = self.encode_values(data).observe(
            ROWS_WRITTEN_METRIC, F.count(F.lit(1)).alias("rows")
        )
        self._query = start_query(
            observed,
            self._sink,
            self._file_format,
            self._path,
            {**self._sink.writer_options, **self.kafka_options},
            trigger=trigger or self._sink.trigger,
            query_name=query_name or self._sink.query_name,
            upserted=data,
        )
        self._started_from = data
        return self._query

    def _exists(self) -> bool:
        if not self._path:
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
