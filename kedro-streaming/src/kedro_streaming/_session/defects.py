"""Defects of a Spark release that one of its own settings works around: set
on the session of a run and of the tests, unless the project set it."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import NamedTuple

from pyspark.sql import SparkSession

logger = logging.getLogger("kedro_streaming.session")


class Workaround(NamedTuple):
    releases: tuple[str, ...]  # the releases with the defect
    setting: str
    value: str
    defect: str  # what goes wrong without it, and where Spark fixed it


WORKAROUNDS = (
    Workaround(
        ("4.2.0",),
        "spark.sql.execution.arrow.pythonUDF.columnarInput.enabled",
        "false",
        # 4.2.0 runs Python UDFs with Arrow by default, and hands them a
        # columnar scan's batches whole; its runner then writes the UDF's
        # command in the layout of 4.1, and the worker waits for ever.
        "a Python UDF over a parquet or Delta source waits for ever "
        "(SPARK-58241, fixed in 4.2.1)",
    ),
)


def work_around_defects(
    spark: SparkSession, chosen: Iterable[str] = ()
) -> list[Workaround]:
    """Sets the workarounds of the running Spark's release on ``spark``,
    except those whose setting the project ``chosen`` itself; returns those
    set.

    Example:
        >>> from kedro_streaming._session.defects import work_around_defects
        >>> [w.setting for w in work_around_defects(spark)]  # Spark 4.2.0
        ['spark.sql.execution.arrow.pythonUDF.columnarInput.enabled']
        >>> spark.conf.get("spark.sql.execution.arrow.pythonUDF.columnarInput.enabled")
        'false'
    """
    chosen = set(chosen)
    applied = [
        workaround
        for workaround in WORKAROUNDS
        if spark.version in workaround.releases and workaround.setting not in chosen
    ]
    for workaround in applied:
        spark.conf.set(workaround.setting, workaround.value)
        logger.info(
            "Spark %s: %s=%s, or %s. Set it in spark.yml to choose otherwise.",
            spark.version,
            workaround.setting,
            workaround.value,
            workaround.defect,
        )
    return applied
