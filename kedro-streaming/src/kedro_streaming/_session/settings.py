"""What ``spark.yml`` sets, checked against the Spark that runs: keys it does
not read (close to ones it does), classes it does not have."""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession

from kedro_streaming._spark import class_loads, jvm_of
from kedro_streaming.errors import StreamingConfigError
from kedro_streaming.problems import TYPO, did_you_mean

# The checks' logger, as named before 0.7.0.
logger = logging.getLogger("kedro_streaming.checks")


def check_spark_settings(spark: SparkSession, conf: dict[str, str]) -> None:
    """Warns about a ``spark.yml`` key that Spark does not know but is close
    to one it does (``spark.sql.shufle.partitions``): Spark keeps any key,
    and ignores what it does not read. Only a warning, since plugins (Delta,
    catalogs) read keys of their own."""
    jvm = jvm_of(spark)
    if jvm is None:
        return
    try:
        entries = jvm.java.lang.Class.forName(
            "org.apache.spark.internal.config.ConfigEntry$"
        )
        field = entries.getDeclaredField("knownConfigs")
        field.setAccessible(True)
        known = set(field.get(entries.getField("MODULE$").get(None)).keySet())
    except Exception as error:  # noqa: BLE001 (another Spark's internals)
        logger.debug("spark.yml's keys not checked: %s", error)
        return
    for key in sorted(conf):
        if key in known or not key.startswith("spark."):
            continue
        fix = did_you_mean(key, known, cutoff=TYPO)
        if fix:
            logger.warning(
                "spark.yml sets `%s`, which Spark does not read: %s", key, fix
            )


# spark.yml settings that name a JVM class: Spark loads it only when a query
# starts, and a name this Spark lacks fails there, as a stack trace.
CLASS_SETTINGS = (
    "spark.sql.streaming.checkpointFileManagerClass",
    "spark.sql.streaming.stateStore.providerClass",
)


def check_setting_classes(spark: SparkSession, conf: dict[str, str]) -> None:
    """Fails unless each class ``spark.yml`` names (``CLASS_SETTINGS``)
    loads in this Spark."""
    jvm = jvm_of(spark)
    missing = [
        f"  - {key}: {conf[key]}"
        for key in CLASS_SETTINGS
        if key in conf and jvm is not None and not class_loads(spark, conf[key])
    ]
    if missing:
        raise StreamingConfigError(
            f"spark.yml names classes that Spark {spark.version} does not have:\n"
            + "\n".join(missing)
            + "\nFix: name the class as this Spark line has it (its checkpoint file "
            "managers are in org.apache.spark.sql.execution.streaming up to 4.0, "
            "in its checkpointing package from 4.1), or drop the line for "
            "Spark's default."
        )
