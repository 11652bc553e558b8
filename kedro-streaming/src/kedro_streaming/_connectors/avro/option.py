"""A Kafka entry's ``avro`` option: its registry, subjects and schemas."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kedro_streaming._connectors.avro.codec import AvroSchemas, decode_values
from kedro_streaming._connectors.avro.registry import SchemaRegistry
from kedro_streaming.errors import StreamingConfigError
from kedro_streaming.problems import did_you_mean

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# The keys of a Kafka source's `avro` option.
AVRO_OPTIONS = (
    "schema_registry_url",
    "subject",
    "version",
    "key_subject",
    "credentials",
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
        """The writer and reader schemas values decode with, from the
        registry at first use; ``plan_id`` adds one."""
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
        """Looks ``schema_id`` up for the next plan: a version registered
        since (decoded then), or an id the registry lacks (each such record
        then quarantined with that reason)."""
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
