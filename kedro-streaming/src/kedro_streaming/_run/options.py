"""Spark's source and sink options, checked by name and value before start.

Spark ignores an option it does not know: a misspelt ``startingOffsets`` on
a new checkpoint silently skips what a Kafka topic holds. The names come
from the running Spark and connectors themselves (the option lists of
Spark's formats, the Kafka connector's keys, the Kafka client's
configuration names, Delta's options), so they are those of the Spark line
that runs. Over Spark Connect, whose JVM is the server's, only the values
are checked.
"""

from __future__ import annotations

import difflib
import json
import logging
from typing import Any

from pyspark.sql import SparkSession

from kedro_streaming._spark import jvm_of

# Named as before 0.7.0: projects' logging.yml may set its level.
logger = logging.getLogger("kedro_streaming.options")

FILE_FORMATS = ("json", "csv", "parquet", "orc", "text")
# Spark's option classes per file format (each lists its options).
_FILE_OPTION_CLASSES = {
    "csv": "org.apache.spark.sql.catalyst.csv.CSVOptions$",
    "json": "org.apache.spark.sql.catalyst.json.JSONOptions$",
    "parquet": "org.apache.spark.sql.execution.datasources.parquet.ParquetOptions$",
    "orc": "org.apache.spark.sql.execution.datasources.orc.OrcOptions$",
    "text": "org.apache.spark.sql.execution.datasources.text.TextOptions$",
}
# The file stream source's own options (Spark's FileStreamOptions, which
# has no list), and those of every file source; modifiedBefore/After are
# batch only.
_FILE_STREAM_OPTIONS = (
    "maxFilesPerTrigger",
    "maxBytesPerTrigger",
    "maxFileAge",
    "latestFirst",
    "fileNameOnly",
    "cleanSource",
    "sourceArchiveDir",
    "maxCachedFiles",
    "discardCachedInputRatio",
    "pathGlobFilter",
    "recursiveFileLookup",
    "ignoreCorruptFiles",
    "ignoreMissingFiles",
    "basePath",
)
# What every file sink takes besides its format's options.
_FILE_SINK_OPTIONS = ("maxRecordsPerFile", "retention")
_RATE_OPTIONS = ("rowsPerSecond", "rampUpTime", "numPartitions")
_KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider$"
_KAFKA_SINK_OPTIONS = ("topic", "includeHeaders")
# The Kafka connector's keys are lower case; as its documentation spells them.
_KAFKA_SPELLING = (
    "assign",
    "subscribe",
    "subscribePattern",
    "startingOffsets",
    "endingOffsets",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestampStrategy",
    "failOnDataLoss",
    "minPartitions",
    "maxRecordsPerPartition",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "kafkaConsumer.pollTimeoutMs",
    "groupIdPrefix",
    "includeHeaders",
    "topic",
)
_KAFKA_CLIENT_CLASSES = {
    "source": (
        "org.apache.kafka.clients.consumer.ConsumerConfig",
        "org.apache.kafka.clients.admin.AdminClientConfig",
    ),
    "sink": ("org.apache.kafka.clients.producer.ProducerConfig",),
}
_DELTA_OPTIONS = "org.apache.spark.sql.delta.DeltaOptions$"

# Values with a fixed vocabulary, by lower-case option name.
_BOOLEAN = {
    name.lower()
    for name in (
        "failOnDataLoss",
        "includeHeaders",
        "latestFirst",
        "fileNameOnly",
        "recursiveFileLookup",
        "ignoreCorruptFiles",
        "ignoreMissingFiles",
        "header",
        "multiLine",
        "inferSchema",
        "mergeSchema",
        "ignoreDeletes",
        "ignoreChanges",
        "skipChangeCommits",
        "readChangeFeed",
    )
}
_POSITIVE_INTEGER = {
    name.lower()
    for name in (
        "maxOffsetsPerTrigger",
        "minOffsetsPerTrigger",
        "maxFilesPerTrigger",
        "minPartitions",
        "maxRecordsPerPartition",
        "rowsPerSecond",
        "numPartitions",
        "maxRecordsPerFile",
    )
}
_CHOICES = {
    "cleansource": ("archive", "delete", "off"),
    "mode": ("PERMISSIVE", "DROPMALFORMED", "FAILFAST"),
}
INTERVAL_TRIGGERS = ("processingTime", "continuous", "realTime")


class OptionNames:
    """The option names the running Spark knows, per format and direction."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        jvm = jvm_of(spark)
        self._loader = (
            jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
            if jvm is not None
            else None
        )
        # Each format's names are read once: each costs py4j round trips.
        self._known: dict[tuple[str, str], dict[str, str] | None] = {}

    def known(self, file_format: str, direction: str) -> dict[str, str] | None:
        """Lower-case name -> spelling, for the reader (``source``) or writer
        (``sink``) of ``file_format``; ``None`` when not known here (another
        format, Spark Connect, a connector not loaded)."""
        key = (file_format, direction)
        if key not in self._known:
            self._known[key] = self._read(file_format, direction)
        return self._known[key]

    def _read(self, file_format: str, direction: str) -> dict[str, str] | None:
        if self._loader is None:
            return None
        try:
            names = self._names(file_format, direction)
        except Exception as error:  # a class this Spark line or classpath lacks
            logger.debug("Options of %s not checked: %s", file_format, error)
            return None
        return None if names is None else {name.lower(): name for name in names}

    def kafka_client(self, direction: str) -> set[str] | None:
        """The Kafka client's configuration names (case-sensitive), without
        the ``kafka.`` prefix Spark's options give them."""
        key = ("kafka client", direction)
        if key not in self._known:
            self._known[key] = self._read_kafka_client(direction)
        return self._known[key]

    def _read_kafka_client(self, direction: str) -> set[str] | None:
        if self._loader is None:
            return None
        try:
            names: set[str] = set()
            for name in _KAFKA_CLIENT_CLASSES[direction]:
                config = self._class(name).getMethod("configNames", None)
                names |= set(config.invoke(None, None))
        except Exception as error:
            logger.debug("Kafka client options not checked: %s", error)
            return None
        return names

    def _names(self, file_format: str, direction: str) -> list[str] | None:
        if file_format == "kafka":
            keys = set(self._constants(_KAFKA_PROVIDER))
            spelt = {name.lower(): name for name in _KAFKA_SPELLING}
            names = [spelt.get(key, key) for key in keys]
            if direction == "sink":
                return [name for name in names if name in _KAFKA_SINK_OPTIONS]
            return [name for name in names if name != "topic"]
        if file_format in _FILE_OPTION_CLASSES:
            own = self._scala_set(_FILE_OPTION_CLASSES[file_format], "getAllOptions")
            extra = (
                _FILE_STREAM_OPTIONS if direction == "source" else _FILE_SINK_OPTIONS
            )
            return [*own, *extra]
        if file_format == "delta":
            return [
                *self._scala_set(_DELTA_OPTIONS, "validOptionKeys"),
                *self._constants(_DELTA_OPTIONS),
            ]
        if file_format == "rate":
            return list(_RATE_OPTIONS)
        return None

    def _class(self, name: str):
        jvm = jvm_of(self._spark)
        return jvm.java.lang.Class.forName(name, True, self._loader)

    def _module(self, name: str):
        cls = self._class(name)
        return cls, cls.getField("MODULE$").get(None)

    def _scala_set(self, name: str, method: str) -> list[str]:
        cls, module = self._module(name)
        values = cls.getMethod(method, None).invoke(module, None)
        converters = jvm_of(self._spark).scala.jdk.javaapi.CollectionConverters
        return list(converters.asJava(values))

    def _constants(self, name: str) -> list[str]:
        """The option-like string constants of a Scala object: what its code
        looks options up by (``startingoffsets``, ``maxFilesPerTrigger``)."""
        cls, module = self._module(name)
        found = []
        for method in cls.getDeclaredMethods():
            if (
                method.getParameterCount() == 0
                and method.getReturnType().getName() == "java.lang.String"
                and not method.getName().startswith(("$", "DEFAULT", "log"))
            ):
                method.setAccessible(True)
                value = method.invoke(module, None)
                if value and _looks_like_option(value):
                    found.append(value)
        return found


def _looks_like_option(value: str) -> bool:
    """``startingoffsets`` or ``fetchoffset.numretries``, not a class name,
    a message or a default value."""
    return (
        value[0].isalpha()
        and all(part.isalnum() for part in value.split("."))
        and not value.startswith(("org.", "com.", "io."))
    )


_FORMAT_LABELS = {"kafka": "Kafka", "delta": "Delta"}


def option_problems(
    names: OptionNames,
    file_format: str,
    direction: str,
    options: dict[str, Any],
    *,
    args_name: str,
    spark_version: str,
) -> list[str]:
    """What is wrong with a dataset's reader or writer options, by name and
    value; empty when nothing is.

    Args:
        names: The option names of the running Spark.
        file_format: The dataset's format.
        direction: ``source`` or ``sink``.
        options: Its options.
        args_name: Where they are set, for the message (``load_args``).
        spark_version: The running Spark's version, for the message.
    """
    problems = []
    known = names.known(file_format, direction)
    client = names.kafka_client(direction) if file_format == "kafka" else None
    label = f"{_FORMAT_LABELS.get(file_format, file_format)} {direction} option"
    for key, value in options.items():
        if file_format == "kafka" and key.lower().startswith("kafka."):
            setting = key[len("kafka.") :]
            if client is not None and setting not in client:
                problems.append(
                    f"`{key}` in its {args_name} is not a Kafka client setting"
                    + _suggestion(setting, client, prefix="kafka.")
                )
            continue
        if known is not None and key.lower() not in known:
            problems.append(
                f"`{key}` in its {args_name} is not a {label} of Spark "
                f"{spark_version}" + _suggestion(key.lower(), known)
            )
            continue
        problem = value_problem(key, value)
        if problem:
            problems.append(f"`{key}: {value}` in its {args_name}: {problem}")
    return problems


def _suggestion(name: str, known: dict[str, str] | set[str], prefix: str = "") -> str:
    spelling = known if isinstance(known, dict) else {k: k for k in known}
    close = difflib.get_close_matches(name, list(spelling), n=1, cutoff=0.7)
    return f": did you mean `{prefix}{spelling[close[0]]}`?" if close else ""


def value_problem(key: str, value: Any) -> str | None:
    """What is wrong with an option's value, for options whose values have a
    fixed vocabulary; ``None`` when nothing is (or nothing is known)."""
    name, text = key.lower(), str(value).strip()
    problem = None
    if name in _BOOLEAN and text.lower() not in ("true", "false"):
        problem = "use true or false"
    elif name in _POSITIVE_INTEGER and not (text.isdigit() and int(text) > 0):
        problem = "use a whole number above 0"
    elif name == "startingoffsets":
        problem = _starting_offsets_problem(text)
    elif name in _CHOICES and text.lower() not in (c.lower() for c in _CHOICES[name]):
        problem = "use one of " + ", ".join(_CHOICES[name])
    return problem


def _starting_offsets_problem(text: str) -> str | None:
    if text.lower() in ("earliest", "latest"):
        return None
    if not text.startswith("{"):
        return (
            "use earliest (read what the topic holds), latest (only what comes "
            "from now on), or per-partition offsets as JSON"
        )
    try:
        json.loads(text)
    except ValueError:
        return (
            "not valid JSON: give the offsets per topic and partition, e.g. "
            '{"trips": {"0": 42}}, or earliest, or latest'
        )
    return None


def interval_problem(spark: SparkSession, interval: str) -> str | None:
    """Why Spark cannot read ``interval`` as a trigger's (``10 seconds``),
    or ``None``."""
    jvm = jvm_of(spark)
    if jvm is None:
        return None
    try:
        jvm.org.apache.spark.sql.streaming.Trigger.ProcessingTime(str(interval))
    except Exception:  # py4j wraps Spark's IllegalArgumentException
        return (
            f"'{interval}' is not an interval Spark reads: write e.g. "
            "'10 seconds', '500 milliseconds' or '1 minute'"
        )
    return None
