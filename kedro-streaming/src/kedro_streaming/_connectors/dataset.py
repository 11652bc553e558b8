"""Streaming sources and sinks as catalog entries, and Spark tables beside them."""

from __future__ import annotations

import importlib
import inspect
import json
from typing import Any

import fsspec
from kedro.io import AbstractDataset
from kedro.io.core import DatasetError
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructType
from pyspark.sql.utils import AnalysisException

from kedro_streaming._connectors.avro import (
    AvroSchemas,
    decode_values,
)
from kedro_streaming._connectors.avro_option import AvroOption
from kedro_streaming._connectors.delta import (
    DELTA_FORMAT,
    create_delta_table,
    upsert_batches,
)
from kedro_streaming._connectors.entry_keys import (
    _LOAD_KEYS,
    _SAVE_KEYS,
    _close_key,
    _redact,
    _secrets_in,
)
from kedro_streaming._connectors.files import (
    APPEND_ONLY_FORMATS,
    _is_local_file_sink,
    _missing_local_folder,
)
from kedro_streaming._connectors.kafka import (
    _NO_BOOTSTRAP,
    _per_topic_problem,
    encode_values,
)
from kedro_streaming._connectors.kafka_security import KafkaSecurity
from kedro_streaming._run.session import spark_session
from kedro_streaming._run.sink_schemas import SELF_DESCRIBING_FORMATS
from kedro_streaming._spark import with_trigger

OUTPUT_MODES = ("append", "complete", "update")
# Formats whose schema is fixed or carried by the data itself.
SCHEMA_FREE_FORMATS = ("kafka", "rate", "text", "socket", "delta")
# Every sink counts the rows it writes under this name, in the query's progress.
ROWS_WRITTEN_METRIC = "rows_written"
TRIGGER_KINDS = ("processingTime", "availableNow", "once", "continuous", "realTime")
# Spark's Real-Time Mode (Spark 4.1+): long-running tasks that stream each
# record through; its trigger's interval is how often the query checkpoints.
REAL_TIME = "realTime"


class SparkStreamingDataset(AbstractDataset[DataFrame, DataFrame]):
    """Loads a streaming DataFrame, or starts a streaming query that saves one.

    Saving starts the query and returns at once; the project's hooks watch it.
    ``start()`` is the same with a trigger and query name chosen by the caller
    (the hooks pass the run's). Credentials are merged into the options and
    never described or logged.

    Example:
        ```yaml
        bronze_trips:
          type: <package>.streaming.SparkStreamingDataset
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
                or ``{"filepath": ...}`` naming a Spark JSON schema file.
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
        self._schema = _schema_from_file(schema) if isinstance(schema, dict) else schema

        self._save_args = dict(save_args or {})
        save = dict(self._save_args)
        self._output_mode = save.pop("output_mode", "append")
        self._checkpoint = save.pop("checkpoint", None)
        self._partition_by = save.pop("partitionBy", None)
        self._foreach_batch = save.pop("foreach_batch", None)
        merge_on = save.pop("merge_on", None)
        self._merge_on = [merge_on] if isinstance(merge_on, str) else merge_on
        self._trigger: dict[str, Any] | None = save.pop("trigger", None)
        self._query_name: str | None = save.pop("query_name", None)
        self._writer_options = save
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
        return self._trigger

    @property
    def load_options(self) -> dict[str, Any]:
        """The reader's options from ``load_args`` (credentials not included)."""
        return dict(self._load_args)

    @property
    def foreach_batch(self) -> str | None:
        """The ``foreach_batch`` function that writes each micro-batch, if any."""
        return self._foreach_batch

    @property
    def writer_options(self) -> dict[str, Any]:
        """The writer's options from ``save_args`` (credentials not included)."""
        return dict(self._writer_options)

    @property
    def credential_keys(self) -> list[str]:
        """The names of the options the credentials add (never their values)."""
        return list(self.kafka_options)

    @property
    def real_time(self) -> bool:
        """Whether its query runs in Real-Time Mode (a ``realTime`` trigger)."""
        return isinstance(self._trigger, dict) and REAL_TIME in self._trigger

    @property
    def checkpoint(self) -> str | None:
        """Where the query that saves this dataset keeps its progress."""
        return self._checkpoint

    @property
    def output_mode(self) -> str:
        """How the query writes: append, update or complete."""
        return self._output_mode

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
        return self._partition_by

    def key_problems(self) -> list[str]:
        """Names each key of the entry that it does not take, and each key of
        save_args or load_args that is not the plugin's but close to one of
        its keys (``checkpiont``): Spark would take it for an option and
        ignore it. Other unknown keys of those are Spark's to check."""
        problems = []
        for key in self._unknown_keys:
            match = _close_key(key, _ENTRY_KEYS)
            nested = _close_key(key, _SAVE_KEYS) or _close_key(key, _LOAD_KEYS)
            if match:
                fix = f"did you mean `{match}`?"
            elif nested:
                args = "save_args" if nested in _SAVE_KEYS else "load_args"
                fix = f"did you mean `{args}: {{{nested}: ...}}`?"
            else:
                fix = "use " + ", ".join(_ENTRY_KEYS)
            problems.append(
                f"has `{key}`, which a SparkStreamingDataset entry does not take: {fix}"
            )
        return problems + [
            f"has `{key}` in its {args_name}: did you mean `{match}`?"
            for args_name, key, match in self._misspelt_args()
        ]

    @property
    def misspelt_keys(self) -> set[str]:
        """The keys of load_args and save_args that ``key_problems`` names:
        the plugin's keys misspelt, not Spark options."""
        return {key for _, key, _ in self._misspelt_args()}

    def _misspelt_args(self) -> list[tuple[str, str, str]]:
        """(load_args or save_args, a key of it, the plugin's key it misspells)."""
        return [
            (args_name, key, match)
            for args_name, args, own in (
                ("load_args", self._load_args, _LOAD_KEYS),
                ("save_args", self._writer_options, _SAVE_KEYS),
            )
            for key in args
            if (match := _close_key(key, own)) and key != match
        ]

    def sink_problems(self) -> list[str]:
        """Says what keeps this dataset from being saved, before any query starts.

        A misspelt key (``key_problems``) is the one problem named: what else
        is missing follows from it."""
        problems = self.key_problems()
        if problems:
            return problems
        if not self._checkpoint:
            problems.append(
                "has no checkpoint: add `save_args: {checkpoint: data/checkpoints/<name>}`"
                " so that a restart resumes where it stopped"
            )
        if self._output_mode not in OUTPUT_MODES:
            problems.append(
                f"has output_mode '{self._output_mode}': use one of {', '.join(OUTPUT_MODES)}"
            )
        elif (
            self._file_format in (*APPEND_ONLY_FORMATS, DELTA_FORMAT)
            and self._output_mode != "append"
            and not self._foreach_batch
            and not self._merge_on
        ):
            problems.append(
                f"has output_mode '{self._output_mode}', which a {self._file_format} "
                "sink does not support (it only appends): use append, with a "
                "watermark before any aggregation, or a sink that can update "
                "(kafka, foreach_batch, or delta with merge_on)"
            )
        if self._merge_on is not None and (
            self._file_format != DELTA_FORMAT
            or not self._path
            or self._foreach_batch
            or not self._merge_on
            or not all(isinstance(key, str) for key in self._merge_on)
        ):
            problems.append(
                "has merge_on, which upserts into a Delta table: give it "
                "`file_format: delta`, a filepath, no foreach_batch, and the key "
                "columns as a list, e.g. `merge_on: [window_start, pickup_borough]`"
            )
        if self._trigger is not None and (
            not isinstance(self._trigger, dict)
            or len(self._trigger) != 1
            or next(iter(self._trigger)) not in TRIGGER_KINDS
        ):
            problems.append(
                f"has trigger {self._trigger!r}: use one of "
                + ", ".join(f"'{kind}: ...'" for kind in TRIGGER_KINDS)
            )
        if self.real_time and (
            self._output_mode != "update"
            or self._file_format != "kafka"
            or self._foreach_batch
        ):
            problems.append(
                "runs in Real-Time Mode (trigger realTime), which writes to Kafka "
                "in output mode update only: set `file_format: kafka` and "
                "`output_mode: update`, or give it a processingTime trigger"
            )
        if not self._file_format and not self._foreach_batch:
            problems.append("has no file_format: set e.g. `file_format: parquet`")
        if self._file_format == "kafka":
            options = {**self._writer_options, **self.kafka_options}
            if not options.get("kafka.bootstrap.servers"):
                problems.append(_NO_BOOTSTRAP.replace("ARGS", "save_args"))
        return problems + _secrets_in(self._writer_options, "save_args")

    def data_problems(self, data: DataFrame) -> list[str]:
        """Says what keeps this sink from writing ``data``, before its query starts."""
        problems = []
        if self._file_format == "kafka" and not self._foreach_batch:
            if "value" not in data.columns:
                problems.append(
                    "writes to Kafka without a `value` column (its columns: "
                    f"{', '.join(data.columns)}): select one, e.g. "
                    '`F.to_json(F.struct("*")).alias("value")`, and a `key` if '
                    "messages need one"
                )
            if self._writer_options.get("topic"):
                return problems
            if "topic" not in data.columns:
                problems.append(
                    "writes to Kafka without a topic: add `save_args: {topic: ...}`, "
                    "or give each row its topic in a `topic` column"
                )
            elif "value" in data.columns:
                value_type = data.schema["value"].dataType
                if isinstance(value_type, StructType):  # a record per topic
                    problems += filter(None, [_per_topic_problem(data, value_type)])
        return problems

    def source_problems(self) -> list[str]:
        """Says what keeps this dataset from being read, before any query starts.

        Only for sources that no query of the same run writes. A misspelt
        key (``key_problems``) is the one problem named.
        """
        problems = self.key_problems()
        if problems:
            return problems
        problems = _secrets_in(self._load_args, "load_args")
        if self._file_format == "kafka":
            options = {**self._load_args, **self.kafka_options}
            if not options.get("kafka.bootstrap.servers"):
                problems.append(_NO_BOOTSTRAP.replace("ARGS", "load_args"))
            if not any(
                options.get(key) for key in ("subscribe", "subscribePattern", "assign")
            ):
                problems.append(
                    "reads Kafka without a topic: add `load_args: {subscribe: <topic>}`"
                )
            return problems
        missing = _missing_local_folder(self._path)
        if missing and self._file_format not in ("rate", "socket"):
            problems.append(missing)
            return problems
        if self._schema is None and self._file_format not in SCHEMA_FREE_FORMATS:
            if not self._path or not _is_local_file_sink(self._path):
                problems.append(
                    f"reads {self._file_format} files from '{self._path}' without a "
                    "schema: add `load_args: {schema: {filepath: <Spark JSON schema>}}` "
                    "(or a DDL string). If the folder is a streaming sink, run the "
                    "pipeline that writes it first (`kedro run --pipelines <name>`)"
                )
        return problems

    @property
    def kafka_client_config(self) -> dict[str, str]:
        """The Kafka client settings Spark derives from the ``kafka.*`` options.

        Secrets included: for connection checks, never for display.
        """
        options = {**self._load_args, **self._writer_options, **self.kafka_options}
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
                for key, value in {**self._load_args, **self._writer_options}.items()
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
        return encode_values(data, self._writer_options.get("topic"), self._avro)

    def _describe(self) -> dict[str, Any]:
        return {
            "filepath": self._path,
            "file_format": self._file_format,
            "load_args": _redact(self._load_args),
            "save_args": _redact(self._save_args),
            "credentials": "***" if self._credentials else None,
            "avro": _redact(self._avro.options) if self._avro else None,
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
        spark = spark_session()
        reader = spark.readStream.format(self._file_format).options(
            **self._load_args, **self.kafka_options
        )
        schema = schema or self._schema
        if self._file_format == "delta":
            schema = None  # a Delta table carries its own; Spark refuses another
        try:
            if (
                schema is None
                and self._path
                and self._file_format not in SCHEMA_FREE_FORMATS
            ):
                # Read even when this process writes the sink: a folder
                # without committed files has nothing to stream yet.
                committed = self._committed_schema(spark)
                schema = self._written_schema() or committed
            if schema is not None:
                reader = reader.schema(schema)
            frame = reader.load(self._path) if self._path else reader.load()
            if self._avro is not None:
                frame = decode_values(frame, self.avro_schemas)
                if self.avro_key_schemas is not None:
                    frame = decode_values(
                        frame, self.avro_key_schemas, "key", nulls=True
                    )
            return frame
        except AnalysisException as exc:
            message = str(exc)
            if any(
                cause in message
                for cause in (
                    "PATH_NOT_FOUND",
                    "UNABLE_TO_INFER_SCHEMA",
                    "DELTA_SCHEMA_NOT_SET",  # no table there yet
                )
            ):
                or_schema = (
                    ""
                    if self._file_format == "delta"
                    else ", or give the source a `schema` in its load_args"
                )
                raise DatasetError(
                    f"There is nothing to stream from '{self._path}' yet: it holds no "
                    f"{self._file_format} files. Run the pipeline that writes it "
                    f"first{or_schema}."
                ) from None
            raise

    def _committed_schema(self, spark) -> StructType:
        reader = spark.read.format(self._file_format)
        if self._file_format in SELF_DESCRIBING_FORMATS:
            reader = reader.option("mergeSchema", "true")
        return reader.load(self._path).schema

    def _written_schema(self) -> StructType | None:
        """The schema of what this dataset's query writes, when this process
        started one: it holds every committed column (``check_sink_schema``
        refuses any other), and those the query adds."""
        if self._started_from is None or self._file_format not in (
            SELF_DESCRIBING_FORMATS
        ):
            return None
        return self._started_from.schema

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
        writer = observed.writeStream.outputMode(self._output_mode).option(
            "checkpointLocation", self._checkpoint
        )
        if self._file_format == DELTA_FORMAT:
            # Columns the query adds (checked before it starts: nothing else
            # changes) join the table's schema.
            writer = writer.option("mergeSchema", "true")
        writer = writer.options(**self._writer_options, **self.kafka_options)
        if self._file_format:
            writer = writer.format(self._file_format)
        query_name = query_name or self._query_name
        if query_name:
            writer = writer.queryName(query_name)
        trigger = trigger or self._trigger
        if trigger:
            writer = with_trigger(writer, trigger)
        if self._partition_by:
            columns = self._partition_by
            writer = writer.partitionBy(
                *([columns] if isinstance(columns, str) else columns)
            )
        if self._foreach_batch:
            writer = writer.foreachBatch(_import_function(self._foreach_batch))
        if self._merge_on:
            create_delta_table(data.sparkSession, self._path, data)
            writer = writer.foreachBatch(
                upsert_batches(self._path, self._merge_on, self._checkpoint)
            )
            self._query = writer.start()
        else:
            self._query = writer.start(self._path) if self._path else writer.start()
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


def _import_function(reference: str):
    module_name, _, function_name = reference.partition(":")
    try:
        return getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise DatasetError(
            f"foreach_batch '{reference}' does not name a function: write it as "
            "'package.module:function'."
        ) from exc
