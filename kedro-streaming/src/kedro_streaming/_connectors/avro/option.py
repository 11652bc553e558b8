"""A Kafka entry's ``avro`` option (its registry, subjects and schemas), and
the ``Avro`` connector's checks of them before the run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kedro_streaming._connectors.avro.codec import AvroSchemas, decode_values
from kedro_streaming._connectors.avro.registry import SchemaRegistry
from kedro_streaming._connectors.base import Connector, RunEntries
from kedro_streaming._spark import class_loads, jvm_of
from kedro_streaming.errors import StreamingConfigError
from kedro_streaming.problems import did_you_mean

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# The keys of a Kafka source's `avro` option.
AVRO_OPTIONS = tuple(
    "schema_registry_url subject version key_subject credentials".split()
)


class AvroOption:
    """The ``avro`` option of a catalog entry: a source's writer and reader
    schemas (asked of the registry at first use), a sink's subjects.

    Example:
        >>> option = AvroOption(
        ...     {"schema_registry_url": "http://localhost:8081", "subject": "t-value"},
        ...     load_args={"subscribe": "t"},
        ... )
        >>> option.subject()
        't-value'
    """

    def __init__(self, options: dict[str, Any], load_args: dict[str, Any]) -> None:
        self.options = dict(options)
        self._load_args = load_args
        self._schemas: AvroSchemas | None = None
        self._key_schemas: AvroSchemas | None = None

    @property
    def schemas(self) -> AvroSchemas:
        """The writer and reader schemas values decode with (asked at first use)."""
        if self._schemas is None:
            self._schemas = AvroSchemas.from_registry(
                self.registry(), self.subject(), self.options.get("version", "latest")
            )
        return self._schemas

    @property
    def key_schemas(self) -> AvroSchemas | None:
        """The schemas keys decode with (``key_subject``), if keys are Avro."""
        if self._key_schemas is None and self.options.get("key_subject"):
            self._key_schemas = AvroSchemas.from_registry(
                self.registry(), str(self.options["key_subject"])
            )
        return self._key_schemas

    def decode(self, frame: DataFrame) -> DataFrame:
        """``frame`` with its values, and keys if Avro too, decoded."""
        frame = decode_values(frame, self.schemas)
        if self.key_schemas is not None:
            frame = decode_values(frame, self.key_schemas, "key", nulls=True)
        return frame

    def plan_id(self, schema_id: int) -> None:
        """Looks ``schema_id`` up for the next plan: a version registered since,
        or an id the registry lacks (its records then quarantined)."""
        self._schemas = self.schemas.with_id(schema_id)
        if self.key_schemas is not None:
            self._key_schemas = self.key_schemas.with_id(schema_id)

    def registry(self) -> SchemaRegistry:
        """The registry the option names, its keys checked first."""
        unknown = sorted(set(self.options) - set(AVRO_OPTIONS))
        if unknown:
            hints = [
                f"{key!r}"
                + (f" ({fix})" if (fix := did_you_mean(key, AVRO_OPTIONS)) else "")
                for key in unknown
            ]
            raise StreamingConfigError(
                f"its `avro` option has {', '.join(hints)}, which it does not "
                f"read; its keys: {', '.join(AVRO_OPTIONS)}"
            )
        address = self.options.get("schema_registry_url")
        if not address:
            raise StreamingConfigError(
                "its `avro` option needs `schema_registry_url`, the registry's "
                "API root (e.g. http://localhost:8081/apis/ccompat/v7)"
            )
        login = self.options.get("credentials") or {}
        return SchemaRegistry(address, login.get("username"), login.get("password"))

    def subject(self) -> str:
        """The subject a source's values are registered under: ``subject``,
        or ``<topic>-value`` of the one topic it reads."""
        if self.options.get("subject"):
            return str(self.options["subject"])
        subscribed = self._load_args.get("subscribe")
        topics = str(subscribed or "").split(",")
        if len(topics) != 1 or not topics[0]:
            raise StreamingConfigError(
                "its `avro` option needs a `subject`: it reads "
                f"{subscribed or 'a topic pattern'}, not one topic whose "
                "<topic>-value subject to read"
            )
        return f"{topics[0].strip()}-value"


def writes_avro(entry: Any) -> bool:
    """Whether a sink encodes its struct values as Avro (the ``avro`` option,
    on a connector that carries Avro)."""
    return entry.avro is not None and entry.connector.carries_avro


class Avro(Connector):
    """Avro values and keys, with their schemas in a registry: each registry
    answers before Spark starts, and Spark has its Avro package."""

    name = "avro"

    def check_before_spark(self, run: RunEntries) -> None:
        problems = []
        for name, dataset in {**run.sources, **run.sinks}.items():
            try:
                if name in run.sources and dataset.avro is not None:
                    dataset.avro.schemas  # noqa: B018 (asks the registry)
                    dataset.avro.key_schemas  # noqa: B018
                elif name in run.sinks and writes_avro(dataset):
                    dataset.avro.registry().subjects()
            except StreamingConfigError as error:
                problems.append(f"'{name}': {error}")
        _refuse_avro(problems)

    def check_with_spark(self, spark: SparkSession, run: RunEntries) -> None:
        names = [n for n, d in run.sources.items() if d.avro is not None] + [
            n for n, d in run.sinks.items() if writes_avro(d)
        ]
        functions = "org.apache.spark.sql.avro.functions"
        # No JVM over Spark Connect: the server's packages are the server's.
        if names and jvm_of(spark) is not None and not class_loads(spark, functions):
            _refuse_avro(
                [
                    f"{', '.join(repr(n) for n in dict.fromkeys(names))} use Avro, "
                    "which this Spark cannot: add org.apache.spark:spark-avro_2.13:"
                    f"{spark.version} to spark.jars.packages in conf/base/spark.yml"
                ]
            )


def _refuse_avro(problems: list[str]) -> None:
    if problems:
        raise StreamingConfigError(
            "Avro datasets cannot start:\n"
            + "\n".join(f"  - {problem}" for problem in problems)
        )
