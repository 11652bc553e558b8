"""Kafka checked before any query starts: each client reaches the brokers and
is let in, each topic exists, a new checkpoint does not skip what a topic
holds."""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections import Counter

from pyspark.sql import SparkSession
from pyspark.sql.utils import is_remote

from kedro_streaming._connectors.base import Entry
from kedro_streaming._connectors.files import has_progress
from kedro_streaming._connectors.kafka.probes import (
    connection_problem,
    forbidden_topics,
    kafka_python_logs,
    login_problem,
)
from kedro_streaming._connectors.kafka.security import (
    client_config,
    entry_security,
    python_config,
)
from kedro_streaming._spark import headline, jvm_of
from kedro_streaming.errors import StreamingConfigError
from kedro_streaming.problems import closest

# The checks' logger, as named before 0.7.0.
logger = logging.getLogger("kedro_streaming.checks")

# The root cause in a Kafka client's error, e.g. "...errors.TimeoutException: ..."
_KAFKA_ERROR = re.compile(r"org\.apache\.kafka\.common\.errors\.(\w+: [^\n]*)")
# Kafka source options that size micro-batches, which Spark refuses in
# Real-Time Mode.
BATCH_SIZE_OPTIONS = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")


def source_tasks(dataset: Entry) -> int | None:
    """The tasks Spark's Kafka source makes for ``dataset`` (one per partition,
    ``minPartitions`` at least); None when not known before start."""
    options = dataset.load_options
    if "assign" in options:
        partitions = sum(len(p) for p in json.loads(options["assign"]).values())
    elif "subscribe" in options:
        from kafka.errors import KafkaError  # noqa: PLC0415

        topics = [t.strip() for t in str(options["subscribe"]).split(",")]
        try:
            with contextlib.closing(offsets_reader(dataset)) as consumer:
                counts = [consumer.partitions_for_topic(t) for t in topics]
        except KafkaError:
            return None
        if any(count is None for count in counts):
            return None  # a topic not created yet
        partitions = sum(len(count) for count in counts)
    else:
        return None
    return max(partitions, int(options.get("minPartitions", 0)))


def check_kafka_reachable(
    spark: SparkSession, name: str, dataset: Entry, timeout: float
) -> None:
    """Fails within about ``timeout`` seconds unless the dataset's brokers accept
    it: as a client of this machine, then through Spark's Kafka source where the
    queries run (a batch read of no topic). Else Spark retries an unreachable
    broker or a wrong password inside a running query for a long time."""
    milliseconds = str(int(timeout * 1000))
    options = {f"kafka.{key}": value for key, value in client_config(dataset).items()}
    servers = options.get("kafka.bootstrap.servers", "")
    security = entry_security(dataset)
    try:
        problem = connection_problem(servers, security, timeout=min(timeout, 10))
    except StreamingConfigError as error:  # a store that does not load
        raise StreamingConfigError(f"'{name}': {error}") from None
    if problem:
        raise StreamingConfigError(
            f"'{name}': the Kafka broker at {servers} {problem}."
        )
    try:
        with _kafka_client_logs_off(spark):
            (
                spark.read.format("kafka")
                .options(**options)
                .option("subscribePattern", "(?!)")  # a pattern no topic matches
                .option("kafka.request.timeout.ms", milliseconds)
                .option("kafka.default.api.timeout.ms", milliseconds)
                .option("fetchOffset.numRetries", "1")
                .load()
                .count()
            )
    except Exception as error:  # py4j, PySpark and Spark Connect errors alike
        text = str(error)
        # The whole Java error, for the log file: the console gets its cause.
        logger.debug("'%s': Spark's Kafka client failed: %s", name, text)
        if "DATA_SOURCE_NOT_FOUND" in text or "find data source: kafka" in text:
            raise StreamingConfigError(
                f"'{name}': the Spark that runs (Spark {spark.version}) has no Kafka "
                "connector. Add org.apache.spark:spark-sql-kafka-0-10_2.13:"
                f"{spark.version} to spark.jars.packages in spark.yml, to "
                "spark-submit's --packages, or to the Spark Connect server's "
                "--packages, whichever starts Spark."
            ) from None
        raise StreamingConfigError(
            f"'{name}': the Kafka broker at {servers} "
            f"{_kafka_failure(text, security, timeout)}"
        ) from None


def _kafka_failure(text: str, security, timeout: float) -> str:
    cause = _KAFKA_ERROR.findall(text)
    detail = cause[-1] if cause else headline(RuntimeError(text))
    if "Authentication" in detail:
        return (
            f"refused the {security.mechanism} login of user "
            f"'{security.username or '?'}': check the password (and the user) in "
            "the entry the dataset names with `credentials:` in "
            "conf/<env>/credentials.yml, or the variables it reads. "
            f"({detail})"
        )
    if "AuthorizationException" in detail:
        return (
            f"does not allow user '{security.username or '?'}' what the query "
            f"needs: ask the brokers' administrators for it ({detail})"
        )
    if "Failed to load SSL" in text:
        return (
            "could not be reached: Spark's Kafka client did not load the trust or "
            "key store named in the credentials (a path, type or password this "
            f"machine's check passed but Spark's does not: on a cluster, the file "
            f"must be on every machine). ({detail})"
        )
    if "Timeout" in detail:
        return (
            f"did not answer within {timeout:g} s: check that it runs and that "
            "the dataset's kafka.bootstrap.servers is right "
            "(`kafka_connect_timeout` in streaming.yml sets the wait)"
        )
    if "IllegalSaslState" in detail:
        return (
            f"takes no {security.mechanism} login on this port, while "
            f"security_protocol is {security.protocol}: use the port of the "
            "brokers' SASL listener in kafka.bootstrap.servers, or drop the login "
            f"from the credentials ({detail})"
        )
    return (
        "could not be used: check that kafka.bootstrap.servers is the port of "
        "the brokers' listener for the credentials' security_protocol "
        f"({security.protocol}) ({detail})"
    )


@contextlib.contextmanager
def _kafka_client_logs_off(spark: SparkSession):
    """Keeps the Kafka client's own log lines (a Java stack per retry) off the
    console while a check provokes them: the check names the cause."""
    if is_remote():  # the server's logs are the server's
        yield
        return
    log4j = jvm_of(spark).org.apache.logging.log4j
    configurator = log4j.core.config.Configurator
    loggers = ("org.apache.kafka", "org.apache.spark.sql.kafka010")
    previous = {name: log4j.LogManager.getLogger(name).getLevel() for name in loggers}
    for logger_name in loggers:
        configurator.setLevel(logger_name, log4j.Level.OFF)
    try:
        yield
    finally:
        for logger_name, level in previous.items():
            configurator.setLevel(logger_name, level)


def check_kafka_topics(
    sources: dict[str, Entry], readers: dict[str, list[str]], sinks: dict[str, Entry]
) -> None:
    """Fails on a Kafka topic that does not exist (else the query fails once
    it runs), and on a new checkpoint that would silently skip what a topic
    holds (Spark's default for one is ``startingOffsets: latest``)."""
    problems = [
        problem
        for name, dataset in sources.items()
        for problem in _topic_problems(name, dataset, readers.get(name, []), sinks)
    ]
    for name, dataset in sinks.items():
        _say_new_sink_topic(name, dataset)
    if problems:
        raise StreamingConfigError(
            "Kafka topics in conf/ cannot be read as configured:\n  - "
            + "\n  - ".join(problems)
        )


def _topic_problems(
    name: str, dataset: Entry, readers: list[str], sinks: dict[str, Entry]
) -> list[str]:
    options = {key.lower(): str(v) for key, v in dataset.load_options.items()}
    topics = _subscribed_topics(options)
    if dataset.file_format != "kafka" or not topics:
        return []
    servers = client_config(dataset).get("bootstrap.servers", "")
    try:
        held, existing = _topic_messages(dataset, topics)
    except Exception as error:  # noqa: BLE001 (kafka-python's and sockets')
        logger.warning(
            "'%s': the topics %s at %s could not be listed (%s): not checked "
            "before start.",
            name,
            ", ".join(topics),
            servers,
            type(error).__name__,
        )
        return []
    auto_create = options.get("kafka.allow.auto.create.topics", "").lower()
    missing = [topic for topic in topics if topic not in existing]
    security = entry_security(dataset)
    try:
        refused = forbidden_topics(servers, security, missing) if missing else []
    except Exception:  # noqa: BLE001 (then only "missing" can be said)
        refused = []
    user = security.username
    problems = [
        f"'{name}' reads the topic '{topic}', which the brokers at {servers} "
        f"do not let {f'user {user!r}' if user else 'this client'} describe "
        "or read (TOPIC_AUTHORIZATION_FAILED): ask the cluster's "
        "administrators for Describe and Read on it, or fix the topic's name"
        for topic in refused
    ]
    for topic in missing:
        if topic in refused or auto_create == "true":
            continue
        close = closest(topic, sorted(existing), many=3)
        problems.append(
            f"'{name}' reads the topic '{topic}', which the brokers at "
            f"{servers} do not have"
            + (
                f" (closest: {', '.join(repr(t) for t in close)})"
                if close
                else f" (they have {len(existing)} topics)"
            )
            + ". Fix the topic's name, or create the topic; to have the brokers "
            "create it when the query subscribes, set "
            "`kafka.allow.auto.create.topics: true` in its load_args"
        )
    waiting = sum(held.values())
    new = [q for q in readers if not has_progress(sinks[q].checkpoint)]
    if waiting and new and "startingoffsets" not in options and "assign" not in options:
        problems.append(
            f"'{name}' would skip the {waiting} messages already in "
            + " and ".join(f"'{t}'" for t in held)
            + f": the new checkpoint of {', '.join(new)} would "
            "start at the topic's end (Spark's default). Say which you mean "
            "in its load_args: `startingOffsets: earliest` to read them, or "
            "`startingOffsets: latest` to skip them knowingly"
        )
    return problems


def _say_new_sink_topic(name: str, dataset: Entry) -> None:
    """Warns of a sink's topic the brokers do not have: they create it at the
    first message (a misspelt one too)."""
    topic = dataset.writer_options.get("topic")
    if dataset.file_format != "kafka" or not topic:
        return
    try:
        _, existing = _topic_messages(dataset, [])
    except Exception:  # noqa: BLE001 (the sources' check says why)
        return
    if topic in existing:
        return
    close = closest(str(topic), sorted(existing), many=3)
    logger.warning(
        "'%s' writes to the topic '%s', which the brokers at %s do not have yet: "
        "they create it at its first message%s.",
        name,
        topic,
        client_config(dataset).get("bootstrap.servers", ""),
        f" (existing topics close to it: {', '.join(close)})" if close else "",
    )


def _subscribed_topics(options: dict[str, str]) -> list[str]:
    """The topics a Kafka source names (not a pattern's)."""
    if "subscribe" in options:
        return [t.strip() for t in options["subscribe"].split(",") if t.strip()]
    if "assign" in options:
        with contextlib.suppress(ValueError):
            return sorted(json.loads(options["assign"]))
    return []


def _topic_messages(
    dataset: Entry, topics: list[str]
) -> tuple[dict[str, int], set[str]]:
    """The messages each existing topic of ``topics`` holds; every topic."""
    from kafka import TopicPartition  # noqa: PLC0415

    with kafka_python_logs(), contextlib.closing(offsets_reader(dataset)) as consumer:
        existing = consumer.topics()
        partitions = [
            TopicPartition(topic, partition)
            for topic in topics
            if topic in existing
            for partition in consumer.partitions_for_topic(topic) or ()
        ]
        first = consumer.beginning_offsets(partitions)
        last = consumer.end_offsets(partitions)
    held: Counter[str] = Counter()
    for partition in partitions:
        held[partition.topic] += last[partition] - first[partition]
    return {topic: count for topic, count in held.items() if count}, existing


def offsets_reader(dataset: Entry):
    """A kafka-python consumer of ``dataset``'s brokers with no group (nothing
    to commit), for the runtime's own reads; fails at once on a refused login
    (kafka-python alone would retry it for 30 s)."""
    from kafka import KafkaConsumer  # noqa: PLC0415
    from kafka.errors import SaslAuthenticationFailedError  # noqa: PLC0415

    config = python_config(dataset)
    refused = login_problem(config["bootstrap_servers"] or "", entry_security(dataset))
    if refused:
        raise SaslAuthenticationFailedError(refused)
    return KafkaConsumer(**config, request_timeout_ms=5000, enable_auto_commit=False)
