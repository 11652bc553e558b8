"""The project's Spark settings fit the Spark it installs: one choice of Spark
line when the project was made sets PySpark, the Kafka connector and Delta."""

from pathlib import Path

import pyspark
import yaml
from kedro_streaming import (
    check_delta_package,
    check_kafka_connector,
    delta_package_for,
    local_scala_version,
)


def test_delta_state_is_rebuilt_in_as_few_tasks_as_shuffles():
    """Delta's default of 50 tasks to rebuild a table's state cost about a
    second per micro-batch on a laptop, in every query of --env delta."""
    conf = Path(__file__).resolve().parents[1] / "conf"
    base = yaml.safe_load((conf / "base/spark.yml").read_text())
    delta = yaml.safe_load((conf / "delta/spark.yml").read_text())
    partitions = int(delta["spark.databricks.delta.snapshotPartitions"])
    assert partitions <= int(base["spark.sql.shuffle.partitions"])


def test_shipped_packages_fit_the_installed_pyspark():
    """The Kafka connector and the Delta package of conf/ are the installed
    PySpark's: one choice of Spark line when the project was made sets them all."""
    conf = Path(__file__).resolve().parents[1] / "conf"
    version = pyspark.__version__
    for env in ("base", "delta"):
        packages = yaml.safe_load((conf / env / "spark.yml").read_text())[
            "spark.jars.packages"
        ]
        assert f"spark-sql-kafka-0-10_2.13:{version}" in packages
        check_kafka_connector(packages, version, local_scala_version())
        check_delta_package(packages, version, local_scala_version())
    assert delta_package_for(version) in packages
