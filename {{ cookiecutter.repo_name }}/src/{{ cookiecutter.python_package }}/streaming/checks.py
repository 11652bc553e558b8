"""What is checked before any query of a run starts."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kedro.io import DataCatalog
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from .dataset import SparkStreamingDataset
from .errors import StreamingConfigError

TRIGGERS = ("processing_time", "available_now")


def run_trigger(settings: dict[str, Any]) -> dict[str, Any] | None:
    """The trigger that the run's ``trigger`` setting forces on every sink.

    Returns:
        ``{"availableNow": True}`` for ``available_now``; ``None`` for
        ``processing_time``, which leaves each sink its own trigger or the
        ``trigger_interval`` default.
    """
    trigger = settings.get("trigger", "processing_time")
    if trigger not in TRIGGERS:
        raise StreamingConfigError(
            f"Unknown trigger '{trigger}': run with `--params trigger=available_now` "
            "(process what is there, then stop) or `--params trigger=processing_time` "
            "(run until stopped)."
        )
    return {"availableNow": True} if trigger == "available_now" else None


def check_configuration(
    sinks: dict[str, SparkStreamingDataset], sources: dict[str, SparkStreamingDataset]
) -> None:
    """Fails, naming every problem and its fix, unless the datasets can work."""
    problems = [
        f"'{name}' {problem}"
        for name, dataset in sinks.items()
        for problem in dataset.sink_problems()
    ]
    problems += [
        f"'{name}' {problem}"
        for name, dataset in sources.items()
        for problem in dataset.source_problems()
    ]
    shared = Counter(dataset.checkpoint for dataset in sinks.values())
    problems += [
        f"{', '.join(sorted(n for n, d in sinks.items() if d.checkpoint == path))} "
        f"share the checkpoint '{path}': give each sink its own"
        for path, count in shared.items()
        if path and count > 1
    ]
    if problems:
        raise StreamingConfigError(
            "Streaming configuration in conf/ cannot work:\n  - "
            + "\n  - ".join(problems)
        )


def check_kafka_reachable(
    spark: SparkSession, name: str, dataset: SparkStreamingDataset, timeout: float
) -> None:
    """Fails within ``timeout`` seconds unless the dataset's brokers accept it.

    The check connects with Spark's own Kafka client and the dataset's ``kafka.*``
    options (credentials included), as the query would. Without it, Spark
    retries an unreachable broker or a wrong password inside a running query
    for a long time.
    """
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: the brokers are the cluster's to reach.
        return
    config = dataset.kafka_client_config
    servers = config.get("bootstrap.servers", "")
    properties = jvm.java.util.Properties()
    for key, value in config.items():
        properties.put(key, value)
    for key in ("request.timeout.ms", "default.api.timeout.ms"):
        properties.put(key, str(int(timeout * 1000)))
    seconds = jvm.java.util.concurrent.TimeUnit.SECONDS
    admin = None
    try:
        admin = jvm.org.apache.kafka.clients.admin.Admin.create(properties)
        admin.describeCluster().nodes().get(int(timeout), seconds)
    except Py4JJavaError as error:
        cause = error.java_exception
        while cause.getCause() is not None:
            cause = cause.getCause()
        kind, detail = cause.getClass().getSimpleName(), cause.getMessage()
        if "Authentication" in kind:
            fix = (
                "refused the credentials: check the entry the dataset names with "
                "`credentials:` in conf/<env>/credentials.yml (or the variables it reads)"
            )
        else:
            fix = (
                f"did not answer within {timeout:g} s: check that it runs and that "
                "the dataset's kafka.bootstrap.servers is right "
                "(`kafka_connect_timeout` in streaming.yml sets the wait)"
            )
        raise StreamingConfigError(
            f"'{name}': the Kafka broker at {servers} {fix}. ({kind}: {detail})"
        ) from None
    finally:
        if admin is not None:
            admin.close(jvm.java.time.Duration.ofSeconds(1))


def headline(error: Exception, limit: int = 1000) -> str:
    """The first line of Spark's message, without the query plan that follows."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    headline = lines[0] if lines else type(error).__name__
    return headline if len(headline) <= limit else headline[:limit] + "..."


def streaming_datasets(
    catalog: DataCatalog, names: set[str]
) -> dict[str, SparkStreamingDataset]:
    datasets = {}
    for name in sorted(names):
        if name in catalog:
            dataset = catalog[name]
            if isinstance(dataset, SparkStreamingDataset):
                datasets[name] = dataset
    return datasets
