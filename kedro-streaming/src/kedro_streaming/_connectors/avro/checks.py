"""Avro sources and sinks through a schema registry: the registry answers
before Spark starts, and Spark has its Avro package."""

from __future__ import annotations

from pyspark.sql import SparkSession

from kedro_streaming._connectors.avro.option import writes_avro
from kedro_streaming._connectors.base import Connector, Entry, RunEntries
from kedro_streaming._spark import class_loads, jvm_of
from kedro_streaming.errors import StreamingConfigError


def check_avro_registries(
    sources: dict[str, Entry],
    sinks: dict[str, Entry],
) -> None:
    """Fails unless the registry of each Avro source and sink answers (its
    address and credentials right; a source's subject there). Needs no
    Spark."""
    problems = []
    for name, dataset in {**sources, **sinks}.items():
        try:
            if name in sources and dataset.avro is not None:
                dataset.avro.schemas  # noqa: B018 (asks the registry)
                dataset.avro.key_schemas  # noqa: B018
            elif name in sinks and writes_avro(dataset):
                dataset.avro.registry().subjects()
        except StreamingConfigError as error:
            problems.append(f"'{name}': {error}")
    _refuse_avro(problems)


def check_avro_package(
    spark: SparkSession,
    sources: dict[str, Entry],
    sinks: dict[str, Entry],
) -> None:
    """Fails unless Spark has its Avro package, when a dataset uses Avro."""
    names = [n for n, d in sources.items() if d.avro is not None] + [
        n for n, d in sinks.items() if writes_avro(d)
    ]
    jvm = jvm_of(spark)  # none over Spark Connect: the server's
    if names and jvm is not None:
        if not class_loads(spark, "org.apache.spark.sql.avro.functions"):
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


class Avro(Connector):
    """Avro values and keys, with their schemas in a registry."""

    name = "avro"

    def check_before_spark(self, run: RunEntries) -> None:
        check_avro_registries(run.sources, run.sinks)

    def check_with_spark(self, spark: SparkSession, run: RunEntries) -> None:
        check_avro_package(spark, run.sources, run.sinks)
