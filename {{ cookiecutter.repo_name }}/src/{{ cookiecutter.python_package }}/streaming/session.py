"""The SparkSession of a project, built from ``spark.yml`` when first needed.

Kedro commands that only read configuration (``kedro catalog``, ``kedro viz``,
``kedro registry``) never start a JVM: the session starts when a pipeline
runs, or when a dataset of this package first loads or saves.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pyspark
from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl
from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from .errors import StreamingConfigError

_KAFKA_CONNECTOR = re.compile(
    r"org\.apache\.spark:spark-sql-kafka-0-10_(?P<scala>[\d.]+):(?P<version>[^:,\s]+)"
)
_settings: dict[str, str] = {}
# spark-submit's report of what `spark.jars.packages` resolved: from its first
# line to the line that says how many jars it copied.
_IVY_REPORT_FIRST = (":: loading settings ::", "Ivy Default Cache set to:")
_IVY_REPORT_LAST = b"artifacts copied"


def configure_spark(settings: dict[str, object]) -> None:
    """Sets what the session is built from, without starting it.

    The Kafka connector in ``spark.jars.packages`` is checked against the
    installed PySpark here, so a mismatch fails before Spark downloads it.
    """
    conf = {key: str(value) for key, value in settings.items()}
    check_kafka_connector(conf, pyspark.__version__, local_scala_version())
    _settings.clear()
    _settings.update(conf)


def spark_session() -> SparkSession:
    """The project's SparkSession; the first call builds it from ``spark.yml``.

    ``spark.remote`` (Spark Connect) or ``spark.master`` choose where it runs.
    """
    conf = dict(_settings)
    remote = conf.pop("spark.remote", None)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder
    if remote:
        builder = builder.remote(remote)
    elif SparkContext._gateway is None:
        _start_jvm_without_ivy_report(conf)
    spark = builder.config(map=conf).getOrCreate()
    if not remote:
        spark.sparkContext.setLogLevel("WARN")
    # On a cluster the running Spark may differ from the local PySpark.
    check_kafka_connector(conf, spark.version, None)
    return spark


def _start_jvm_without_ivy_report(conf: dict[str, str]) -> None:
    """Starts Spark's JVM, keeping the dependency report off the console.

    spark-submit prints Ivy's report for ``spark.jars.packages`` at every start
    and has no setting against it. The JVM's stderr goes through a thread that
    drops the report once the resolution has succeeded (and shows it if not,
    since it then says why); every other line is passed on to stderr.
    """
    read_end, write_end = os.pipe()
    threading.Thread(
        target=_forward_stderr, args=(read_end,), name="spark-jvm-stderr", daemon=True
    ).start()
    try:
        gateway = launch_gateway(
            SparkConf(loadDefaults=False).setAll(list(conf.items())),
            popen_kwargs={"stderr": write_end},
        )
    finally:
        os.close(write_end)  # the JVM has its own copy
    SparkContext._ensure_initialized(gateway=gateway)


def _forward_stderr(read_end: int) -> None:
    held: list[bytes] = []
    with os.fdopen(read_end, "rb") as lines:
        for line in lines:
            if not held and line.decode(errors="replace").startswith(_IVY_REPORT_FIRST):
                held.append(line)
            elif held:
                held.append(line)
                if _IVY_REPORT_LAST in line:
                    held = []
            else:
                os.write(2, line)
    for line in held:  # the resolution did not finish: its report says why
        os.write(2, line)


def check_kafka_connector(
    spark_conf: dict[str, str], spark_version: str, scala_version: str | None
) -> None:
    """Fails unless the Kafka connector in ``spark.jars.packages`` fits this Spark."""
    packages = spark_conf.get("spark.jars.packages", "")
    for match in _KAFKA_CONNECTOR.finditer(packages):
        wrong_version = match["version"] != spark_version
        wrong_scala = scala_version is not None and match["scala"] != scala_version
        if wrong_version or wrong_scala:
            scala = scala_version or match["scala"]
            raise StreamingConfigError(
                f"spark.yml asks for the Kafka connector {match[0]}, but the running "
                f"Spark is {spark_version}"
                + (f" built for Scala {scala_version}" if scala_version else "")
                + ". Set spark.jars.packages in conf/base/spark.yml to "
                f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{spark_version}, "
                "or install the pyspark version the connector was built for."
            )


def local_scala_version() -> str | None:
    """The Scala binary version of the Spark jars bundled with PySpark, e.g. 2.13."""
    jars = Path(pyspark.__file__).parent / "jars"
    for jar in jars.glob("scala-library-*.jar"):
        found = re.match(r"scala-library-(\d+\.\d+)", jar.name)
        if found:
            return found[1]
    return None


class SparkHooks:
    """Reads ``spark.yml``; the session itself starts with the first pipeline run."""

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        configure_spark(context.config_loader["spark"])

    @hook_impl
    def before_pipeline_run(self) -> None:
        spark_session()
