"""Kafka as a source and a sink (the ``Kafka`` connector): what an entry
needs, its options, what a sink's rows need, how values are encoded, and how
far a query's sources are behind (lag)."""

from __future__ import annotations

import re
from collections import Counter
from contextlib import closing
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from kedro_streaming._connectors.avro.codec import encode_value, value_schema
from kedro_streaming._connectors.avro.option import AvroOption
from kedro_streaming._connectors.base import Connector, Entry, LagUnknown, RunEntries
from kedro_streaming._connectors.kafka.checks import (
    check_kafka_reachable,
    check_kafka_topics,
    offsets_reader,
)
from kedro_streaming._connectors.kafka.probes import client_failure, kafka_python_logs
from kedro_streaming._connectors.kafka.security import (
    KafkaSecurity,
    client_config,
    entry_security,
)
from kedro_streaming.errors import StreamingConfigError
from kedro_streaming.problems import Problem

if TYPE_CHECKING:
    from kedro_streaming._connectors.options import OptionNames

_KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider$"
_KAFKA_SINK_OPTIONS = ("topic", "includeHeaders")
# How a source names what it reads, and a sink where it writes.
_SUBSCRIPTIONS = {
    "subscribe": "topic",
    "subscribePattern": "topics matching",
    "assign": "partitions",
    "topic": "topic",
}
# The Kafka connector's keys are lower case; as its documentation spells them.
_KAFKA_SPELLING = (
    "assign subscribe subscribePattern startingOffsets endingOffsets "
    "startingOffsetsByTimestamp endingOffsetsByTimestamp startingTimestamp "
    "endingTimestamp startingOffsetsByTimestampStrategy failOnDataLoss "
    "minPartitions maxRecordsPerPartition maxOffsetsPerTrigger minOffsetsPerTrigger "
    "maxTriggerDelay fetchOffset.numRetries fetchOffset.retryIntervalMs "
    "kafkaConsumer.pollTimeoutMs groupIdPrefix includeHeaders topic"
).split()
_KAFKA_CLIENT_CLASSES = {
    "source": (
        "org.apache.kafka.clients.consumer.ConsumerConfig",
        "org.apache.kafka.clients.admin.AdminClientConfig",
    ),
    "sink": ("org.apache.kafka.clients.producer.ProducerConfig",),
}


class Kafka(Connector):
    """Kafka sources and sinks: their options, values encoded as JSON or Avro,
    brokers and topics checked before start, and the messages left unread."""

    name = "kafka"
    formats = ("kafka",)
    label = "Kafka"
    takes_schema = False
    real_time = True
    carries_avro = True
    client_prefix = "kafka."

    def source_problems(self, entry: Entry) -> list[Problem]:
        options = {**entry.load_options, **self.spark_options(entry)}
        problems = []
        if not options.get("kafka.bootstrap.servers"):
            problems.append(_no_bootstrap("load_args"))
        if not any(map(options.get, ("subscribe", "subscribePattern", "assign"))):
            problems.append(
                Problem(
                    "reads Kafka without a topic",
                    "add `load_args: {subscribe: <topic>}`",
                    id="KAFKA_SOURCE_WITHOUT_TOPIC",
                )
            )
        return problems

    def sink_problems(self, entry: Entry) -> list[Problem]:
        options = {**entry.writer_options, **self.spark_options(entry)}
        if options.get("kafka.bootstrap.servers"):
            return []
        return [_no_bootstrap("save_args")]

    def data_problems(self, entry: Entry, data: DataFrame) -> list[Problem]:
        if entry.foreach_batch:
            return []
        return kafka_data_problems(data, entry.writer_options.get("topic"))

    def spark_options(self, entry: Entry) -> dict[str, Any]:
        return KafkaSecurity(entry.credentials).spark_options()

    def option_names(self, names: OptionNames, direction: str) -> list[str] | None:
        spelt = {name.lower(): name for name in _KAFKA_SPELLING}
        known = [spelt.get(key, key) for key in set(names.constants(_KAFKA_PROVIDER))]
        if direction == "sink":
            return [name for name in known if name in _KAFKA_SINK_OPTIONS]
        return [name for name in known if name != "topic"]

    def client_settings(self, names: OptionNames, direction: str) -> set[str] | None:
        classes = _KAFKA_CLIENT_CLASSES[direction]
        return set().union(*(names.config_names(name) for name in classes))

    def encode(self, entry: Entry, data: DataFrame) -> DataFrame:
        return encode_values(data, entry.writer_options.get("topic"), entry.avro)

    def describe(self, entry: Entry) -> str:
        options = entry.load_options
        topic = options.get("subscribe") or options.get("subscribePattern")
        return f"Kafka {topic or 'assigned partitions'}"

    def identity(self, entry: Entry) -> str | None:
        options = {**entry.load_options, **entry.writer_options}
        for option, what in _SUBSCRIPTIONS.items():
            if option in options:
                return f"Kafka {what} {options[option]}"
        return "Kafka, each row's topic"

    def address(self, entry: Entry) -> str | None:
        servers = client_config(entry).get("bootstrap.servers", "?")
        return f"Kafka {_topic(entry) or 'a topic column'} at {servers}"

    def kept_by_reset(self, entry: Entry) -> str:
        return (
            "Its Kafka topic is left alone: the next run appends everything again "
            "after what it holds."
        )

    def offset_range(self, start: Any, end: Any) -> str | None:
        return kafka_offset_range(start, end)

    def unread(self, entry: Entry, committed: list[dict]) -> str | None:
        return unread_messages(entry, committed)

    def check_package(
        self, packages: str, spark_version: str, scala: str | None, fix: str | None
    ) -> None:
        check_kafka_connector(packages, spark_version, scala, fix)

    def check_with_spark(self, spark: SparkSession, run: RunEntries) -> None:
        timeout = float(run.settings.get("kafka_connect_timeout", 30))
        for name, entry in run.of(self).items():
            check_kafka_reachable(spark, name, entry, timeout)
        check_kafka_topics(run.sources, run.readers, run.sinks)


def _topic(entry: Entry) -> str | None:
    options = {**entry.load_options, **entry.writer_options}
    keys = ("subscribe", "subscribePattern", "assign", "topic")
    return next((str(options[key]) for key in keys if key in options), None)


def _no_bootstrap(args: str) -> Problem:
    return Problem(
        "reads or writes Kafka without bootstrap servers",
        f"add `kafka.bootstrap.servers: host:9092` to its {args}",
        id="KAFKA_WITHOUT_BOOTSTRAP_SERVERS",
    )


def kafka_data_problems(data: DataFrame, topic: str | None) -> list[Problem]:
    """What keeps a Kafka sink from writing ``data``: a ``value`` column, and a
    topic (save_args' or a ``topic`` column)."""
    problems = []
    if "value" not in data.columns:
        problems.append(
            Problem(
                "writes to Kafka without a `value` column (its columns: "
                f"{', '.join(data.columns)})",
                'select one, e.g. `F.to_json(F.struct("*")).alias("value")`, and '
                "a `key` if messages need one",
                id="KAFKA_SINK_WITHOUT_VALUE",
            )
        )
    if topic:
        return problems
    if "topic" not in data.columns:
        problems.append(
            Problem(
                "writes to Kafka without a topic",
                "add `save_args: {topic: ...}`, or give each row its topic in a "
                "`topic` column",
                id="KAFKA_SINK_WITHOUT_TOPIC",
            )
        )
    elif "value" in data.columns:
        value_type = data.schema["value"].dataType
        if isinstance(value_type, StructType):  # a record per topic
            problems += filter(None, [_per_topic_problem(data, value_type)])
    return problems


def _per_topic_problem(data: DataFrame, value_type: StructType) -> str | None:
    """Why ``value`` cannot be a record per topic, if it cannot."""
    if "topic" not in data.columns:
        return (
            "writes a struct `value` without a topic: add `save_args: {topic: "
            "...}`, or a `topic` column with `value` holding one record per "
            "topic, named after it"
        )
    plain = [
        f.name for f in value_type.fields if not isinstance(f.dataType, StructType)
    ]
    if plain:
        return (
            "names each row's topic in a `topic` column, so its `value` must hold "
            "one record (a struct) per topic, named after it; "
            f"{', '.join(plain)} is not a struct"
        )
    return None


def kafka_offset_range(start: Any, end: Any) -> str | None:
    """A batch's Kafka offsets, per topic and partition, first to last read.

    Example:
        >>> kafka_offset_range({"trips": {"0": 100}}, {"trips": {"0": 220, "1": 5}})
        'trips[0] offsets 100 to 219, trips[1] offsets 0 to 4'
    """
    if not isinstance(end, dict):
        return None
    start = start if isinstance(start, dict) else {}
    ranges = []
    for topic, partitions in sorted(end.items()):
        for partition, last in sorted(partitions.items(), key=lambda p: int(p[0])):
            first = int(start.get(topic, {}).get(partition, 0))
            if int(last) > first:
                ranges.append(
                    f"{topic}[{partition}] offsets {first} to {int(last) - 1}"
                )
    return ", ".join(ranges) or "no message"


def kafka_lag(source: dict[str, Any]) -> dict[str, dict[str, int]] | None:
    """Per topic and partition, a Kafka source's latest offsets minus the
    batch's end offsets; ``None`` for other sources, and where the latest were
    read before the batch ended (Real-Time Mode's tasks read on past them)."""
    end, latest = source.get("endOffset"), source.get("latestOffset")
    if not str(source.get("description", "")).startswith("Kafka"):
        return None
    if not isinstance(end, dict) or not isinstance(latest, dict):
        return None
    lag = {
        topic: {
            partition: int(offset) - int(end.get(topic, {}).get(partition, offset))
            for partition, offset in partitions.items()
        }
        for topic, partitions in latest.items()
    }
    if any(behind < 0 for partitions in lag.values() for behind in partitions.values()):
        return None
    return lag


def unread_messages(dataset: Entry, committed: list[dict]) -> str:
    """Messages in the topics after the offsets of the last committed batch;
    LagUnknown when the brokers do not tell."""
    from kafka import TopicPartition  # noqa: PLC0415
    from kafka.errors import KafkaError  # noqa: PLC0415

    partitions = {
        TopicPartition(topic, int(partition)): offset
        for offsets in committed
        if all(isinstance(value, dict) for value in offsets.values())
        for topic, by_partition in offsets.items()
        for partition, offset in by_partition.items()
    }
    if not partitions:
        return "unknown (no batch committed yet)"
    security = entry_security(dataset)
    servers = client_config(dataset).get("bootstrap.servers", "")
    with kafka_python_logs() as logged:
        try:
            with closing(offsets_reader(dataset)) as consumer:
                latest = consumer.end_offsets(list(partitions))
        except (KafkaError, StreamingConfigError, OSError) as error:
            raise LagUnknown(
                f"the Kafka broker at {servers} "
                f"{client_failure(servers, security, error, logged)}"
            ) from None
    by_topic: Counter[str] = Counter()
    for partition, offset in partitions.items():
        by_topic[partition.topic] += max(0, latest[partition] - offset)
    return ", ".join(
        f"{topic} {lag} messages" for topic, lag in sorted(by_topic.items())
    )


def encode_values(
    data: DataFrame, topic: str | None, avro: AvroOption | None
) -> DataFrame:
    """``data`` with a struct ``value`` encoded as JSON (nulls too), or as
    Confluent-framed Avro registered under ``<topic>-value`` with the ``avro``
    option; per row's topic when ``value`` holds one record per topic."""
    if "value" not in data.columns:
        return data
    value_type = data.schema["value"].dataType
    if not isinstance(value_type, StructType):
        return data
    if topic:
        records = {str(topic): (F.col("value"), value_type)}
    else:
        problem = _per_topic_problem(data, value_type)
        if problem:
            raise StreamingConfigError(problem)
        records = {
            f.name: (F.col("value")[f.name], f.dataType) for f in value_type.fields
        }
    encoded = {}
    for name, (record, record_type) in records.items():
        if avro is None:
            encoded[name] = F.to_json(record, {"ignoreNullFields": "false"})
        else:
            schema = value_schema(record_type, name)
            subject = avro.options.get("subject") if topic else None
            schema_id = avro.registry().register(subject or f"{name}-value", schema)
            encoded[name] = encode_value(record, schema, schema_id)
    if topic:
        return data.withColumn("value", encoded[str(topic)])
    value = F.when(F.lit(False), F.lit(None))
    for name, column in encoded.items():
        value = value.when(F.col("topic") == name, column)
    unknown = F.raise_error(
        F.concat(
            F.lit("kedro-streaming: a row's topic "),
            F.coalesce(F.col("topic"), F.lit("null")),
            F.lit(f" has no record in `value`, whose records are {', '.join(records)}"),
        )
    )
    return data.withColumn("value", value.otherwise(unknown))


# Spark's own packages, released with each Spark version.
_SPARK_PACKAGE = re.compile(
    r"org\.apache\.spark:(?P<artifact>spark-sql-kafka-0-10|spark-avro)"
    r"_(?P<scala>[\d.]+):(?P<version>[^:,\s]+)"
)
_PACKAGE_NAMES = {"spark-sql-kafka-0-10": "the Kafka connector", "spark-avro": "Avro"}


def check_kafka_connector(
    packages: str,
    spark_version: str,
    scala_version: str | None,
    fix: str | None = None,
) -> None:
    """Fails unless Spark's packages (the Kafka connector, Avro) among
    ``spark.jars.packages`` fit the running Spark; ``fix`` says where to set
    the right one (default: ``spark.yml``).

    Example:
        >>> from kedro_streaming import check_kafka_connector
        >>> package = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1"
        >>> check_kafka_connector(package, "4.1.1", "2.13")  # it fits: no error
        >>> check_kafka_connector(package, "4.2.0", "2.13")
        Traceback (most recent call last):
          ...
        kedro_streaming.errors.StreamingConfigError: spark.yml asks for the Kafka
        connector org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1, but the running
        Spark is 4.2.0 ... use org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0, ...
    """
    for match in _SPARK_PACKAGE.finditer(packages):
        wrong_version = match["version"] != spark_version
        wrong_scala = scala_version is not None and match["scala"] != scala_version
        if wrong_version or wrong_scala:
            scala = scala_version or match["scala"]
            raise StreamingConfigError(
                f"spark.yml asks for {_PACKAGE_NAMES[match['artifact']]} "
                f"{match[0]}, but the running Spark is {spark_version}"
                + (f" built for Scala {scala_version}" if scala_version else "")
                + f". Fix: {fix or 'in spark.jars.packages of conf/base/spark.yml, use'} "
                f"org.apache.spark:{match['artifact']}_{scala}:{spark_version}"
                + ("" if fix else ", or install the pyspark the package was built for")
                + "."
            )
