"""Spark's source and sink options, checked by name and value before start.

Spark ignores an option it does not know (a misspelt ``startingOffsets``
silently skips a topic's data); names come from the running Spark's JVM, so
over Spark Connect only values are checked.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession

from kedro_streaming._spark import jvm_of
from kedro_streaming.problems import did_you_mean

if TYPE_CHECKING:
    from kedro_streaming._connectors.base import Connector

# Named as before 0.7.0: projects' logging.yml may set its level.
logger = logging.getLogger("kedro_streaming.options")

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
    """The option names the running Spark knows, per connector and direction."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        jvm = jvm_of(spark)
        self._loader = (
            jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
            if jvm is not None
            else None
        )
        # Each format's names are read once: each costs py4j round trips.
        self._known: dict[tuple[str, str, str], Any] = {}

    def known(self, connector: Connector, direction: str) -> dict[str, str] | None:
        """Lower-case name -> spelling, for ``connector``'s ``source`` or
        ``sink``; ``None`` when not known here (e.g. Spark Connect)."""
        names = self._read(connector, direction, connector.option_names)
        return None if names is None else {name.lower(): name for name in names}

    def client(self, connector: Connector, direction: str) -> set[str] | None:
        """The settings its client takes, without their prefix (``kafka.``)."""
        names = self._read(connector, f"{direction} client", connector.client_settings)
        return None if names is None else set(names)

    def _read(self, connector: Connector, direction: str, read) -> Any:
        key = (connector.name, connector.label, direction)
        if key not in self._known:
            self._known[key] = None
            if self._loader is not None:
                try:
                    self._known[key] = read(self, direction.split(maxsplit=1)[0])
                except Exception as error:  # a class this Spark or classpath lacks
                    logger.debug("Options of %s not checked: %s", key, error)
        return self._known[key]

    def _class(self, name: str):
        jvm = jvm_of(self._spark)
        return jvm.java.lang.Class.forName(name, True, self._loader)

    def _module(self, name: str):
        cls = self._class(name)
        return cls, cls.getField("MODULE$").get(None)

    def scala_set(self, name: str, method: str) -> list[str]:
        """The strings of a Scala object's method that returns a set of them."""
        cls, module = self._module(name)
        values = cls.getMethod(method, None).invoke(module, None)
        converters = jvm_of(self._spark).scala.jdk.javaapi.CollectionConverters
        return list(converters.asJava(values))

    def config_names(self, name: str) -> set[str]:
        """The names of a Java ``...Config`` class's ``configNames()``."""
        config = self._class(name).getMethod("configNames", None)
        return set(config.invoke(None, None))

    def constants(self, name: str) -> list[str]:
        """The option-like string constants of a Scala object."""
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
    """``fetchoffset.numretries``, not a class name, message or default."""
    return (
        value[0].isalpha()
        and all(part.isalnum() for part in value.split("."))
        and not value.startswith(("org.", "com.", "io."))
    )


def option_problems(
    names: OptionNames,
    connector: Connector,
    direction: str,
    options: dict[str, Any],
    *,
    args_name: str,
    spark_version: str,
) -> list[str]:
    """What is wrong with a dataset's ``source`` or ``sink`` options, by name
    and value; ``args_name`` says where they are set (``load_args``)."""
    problems = []
    known = names.known(connector, direction)
    prefix = connector.client_prefix
    label = f"{connector.label} {direction} option"
    for key, value in options.items():
        if prefix and key.lower().startswith(prefix):
            setting, client = key[len(prefix) :], names.client(connector, direction)
            if client is not None and setting not in client:
                fix = did_you_mean(setting, {name: prefix + name for name in client})
                problems.append(
                    f"`{key}` in its {args_name} is not a {connector.label} client "
                    "setting" + (f": {fix}" if fix else "")
                )
            continue
        if known is not None and key.lower() not in known:
            fix = did_you_mean(key.lower(), known)
            problems.append(
                f"`{key}` in its {args_name} is not a {label} of Spark "
                f"{spark_version}" + (f": {fix}" if fix else "")
            )
            continue
        problem = value_problem(key, value)
        if problem:
            problems.append(f"`{key}: {value}` in its {args_name}: {problem}")
    return problems


def value_problem(key: str, value: Any) -> str | None:
    """What is wrong with an option's value of a fixed vocabulary, or ``None``."""
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
    """Why Spark cannot read ``interval`` as a trigger's, or ``None``."""
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
