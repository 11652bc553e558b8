"""What the connectors and the run-level code share: the catalog entry as a
connector reads it, and a connector's checks, each a no-op unless the
connector has one.

The runtime checks a run by asking every connector in turn
(``_connectors.CONNECTORS``); a connector reads the run's entries through
``Entry`` and never imports the dataset class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kedro_streaming._connectors.kafka_security import KafkaSecurity


class Entry(Protocol):
    """A streaming source or sink of the catalog, as connectors read it."""

    file_format: str
    path: str | None
    checkpoint: str | None
    load_options: dict[str, Any]
    writer_options: dict[str, Any]
    foreach_batch: str | None
    trigger: dict[str, Any] | None
    kafka_security: KafkaSecurity
    kafka_client_config: dict[str, str]
    kafka_python_config: dict[str, Any]
    reads_avro: bool
    writes_avro: bool


@dataclass(frozen=True)
class RunEntries:
    """The streaming entries a run reads and writes.

    ``readers`` maps each entry a query reads (a source, or a sink of the
    run read back as a stream) to the sinks whose queries read it.
    """

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


class Connector:
    """One thing the runtime connects (files, Kafka, Avro, Delta)."""

    name = "connector"

    def problems(self, run: RunEntries) -> list[str]:
        """What cannot work in the run's configuration, read from conf/ and the
        file system only; each problem names its fix."""
        return []

    def check_before_spark(self, run: RunEntries) -> None:
        """Fails on what can be asked of outside services before Spark starts."""

    def check_with_spark(self, spark: SparkSession, run: RunEntries) -> None:
        """Fails on what the running Spark or the services say, before any
        query starts."""
