"""The one interface of what the runtime connects (files, Delta, Kafka, ...),
and the catalog entry as connectors read it. The run reaches a connector only
through ``registry``; a connector never imports the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter, StreamingQuery
    from pyspark.sql.types import StructType

    from kedro_streaming._connectors.avro.option import AvroOption
    from kedro_streaming.problems import Problem

# Every sink counts the rows it writes under this name, in the query's progress.
ROWS_WRITTEN_METRIC = "rows_written"
# Every source counts the rows it reads under a name that starts so, one per
# load: Spark's numInputRows counts rows after parquet's row-group skipping.
ROWS_READ_METRIC = "rows_read"


class LagUnknown(Exception):
    """A service did not tell how far a query is behind (the message says why)."""


class Entry(Protocol):
    """A streaming source or sink of the catalog, as connectors read it."""

    file_format: str
    connector: Connector
    path: str | None
    schema: Any  # a source's given schema (DDL or StructType), if any
    checkpoint: str | None
    load_options: dict[str, Any]
    writer_options: dict[str, Any]
    credentials: dict[str, Any]  # secrets: for the connector, never shown
    sink: Any  # its save_args read (sink_args.SinkArgs)
    avro: AvroOption | None
    foreach_batch: str | None
    trigger: dict[str, Any] | None


@dataclass(frozen=True)
class RunEntries:
    """The streaming entries a run reads and writes; ``readers`` maps each
    entry a query reads to the sinks whose queries read it."""

    sources: dict[str, Entry]
    sinks: dict[str, Entry]
    readers: dict[str, list[str]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def read_by(self, sink: str) -> dict[str, Entry]:
        """The entries the sink's query reads."""
        entries = {**self.sinks, **self.sources}
        return {
            name: entries[name]
            for name, sinks in self.readers.items()
            if sink in sinks and name in entries
        }

    def of(self, connector: Connector) -> dict[str, Entry]:
        """The run's sources and sinks of ``connector``'s formats."""
        return {
            name: entry
            for name, entry in {**self.sources, **self.sinks}.items()
            if type(entry.connector) is type(connector)
        }


class Connector:
    """One thing the runtime connects; each method a no-op or Spark's plain
    behaviour unless the connector has its own."""

    name = "spark"
    formats: tuple[str, ...] = ()
    # How messages name it: "a Kafka source option".
    label = ""
    # Whether a source needs a schema: not when the format fixes it (Kafka's
    # key/value, text's value) or the data carries it (Delta's log).
    takes_schema = True
    keeps_schema = False  # a given schema is refused: the table has its own
    self_describing = False  # its files carry their schema
    only_appends = False  # a sink has no update or complete output mode
    real_time = False
    upserts = False  # by key: `merge_on`
    carries_avro = False
    client_prefix: str | None = None

    def __init__(self, file_format: str = "") -> None:
        self.file_format = file_format
        self.label = type(self).label or file_format

    def source_problems(self, entry: Entry) -> list[Problem]:
        """What keeps the entry from being read, from conf/ and files alone."""
        return []

    def sink_problems(self, entry: Entry) -> list[Problem]:
        """What keeps the entry from being written, from conf/ alone."""
        return []

    def data_problems(self, entry: Entry, data: DataFrame) -> list[Problem]:
        """What keeps the sink from writing ``data``, before its query starts."""
        return []

    def table_schema(self, entry: Entry, written: StructType) -> StructType:
        """The schema of the sink's table when its query writes ``written``."""
        return written

    def spark_options(self, entry: Entry) -> dict[str, Any]:
        """Its credentials as reader and writer options (secrets included)."""
        return {}

    def option_names(self, names: Any, direction: str) -> list[str] | None:
        """The ``source`` or ``sink`` options Spark knows for it, or ``None``."""
        return None

    def client_settings(self, names: Any, direction: str) -> set[str] | None:
        """The settings its client takes under ``client_prefix``."""
        return None

    def encode(self, entry: Entry, data: DataFrame) -> DataFrame:
        """``data`` as the sink writes it."""
        return data

    def writer(self, entry: Entry, writer: DataStreamWriter) -> DataStreamWriter:
        """The writer with the connector's own options."""
        return writer

    def start(
        self, entry: Entry, writer: DataStreamWriter, data: DataFrame
    ) -> StreamingQuery:
        """Starts the query that writes ``data`` (the node's DataFrame)."""
        return writer.start(entry.path) if entry.path else writer.start()

    def describe(self, entry: Entry) -> str:
        """The entry in a few words, for the run's lines."""
        where = f" at {entry.path}" if entry.path else ""
        return f"{entry.file_format}{where}"

    def address(self, entry: Entry) -> str | None:
        """Where its data lives, for a failed query's message, if not said."""
        return None

    def identity(self, entry: Entry) -> str | None:
        """What a checkpoint's offsets of it point into, when not its folder
        (a topic): a query reading another one cannot resume them."""
        return None

    def holds_data(self, entry: Entry) -> bool:
        """Whether the entry's table or folder has been written."""
        return False

    def sink_figures(self, entry: Entry) -> list[str]:
        """What ``kedro streams status`` says of the sink's table."""
        return []

    def kept_by_reset(self, entry: Entry) -> str:
        """What ``kedro streams reset`` leaves of a sink without a folder."""
        return ""

    def batch_output(
        self, spark: SparkSession, entry: Entry, query_id: str, batch: int
    ) -> DataFrame | None:
        """The rows a sink's query wrote in ``batch`` (the query ``query_id``),
        read back; ``None`` where the sink does not say which are those."""
        return None

    def offset_range(self, start: Any, end: Any) -> str | None:
        """A batch's offsets of the source (Spark's, from its checkpoint), in a
        few words, where they say more than a count of rows."""
        return None

    def unread(self, entry: Entry, committed: list[dict]) -> str | None:
        """What the source holds past ``committed``; raises ``LagUnknown``."""
        return None

    def check_package(
        self, packages: str, spark_version: str, scala: str | None, fix: str | None
    ) -> None:
        """Fails unless its package among ``packages`` (``spark.jars.packages``)
        fits the running Spark; ``fix`` says where to set the right one."""

    def problems(self, run: RunEntries) -> list[str]:
        """What cannot work in the run's configuration, from conf/ and files."""
        return []

    def check_before_spark(self, run: RunEntries) -> None:
        """Fails on what can be asked of outside services before Spark starts."""

    def check_with_spark(self, spark: SparkSession, run: RunEntries) -> None:
        """Fails on what Spark or the services say, before any query starts."""
