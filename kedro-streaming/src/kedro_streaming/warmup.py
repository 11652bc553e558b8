"""A query's first seconds, paid before it reads anything.

A JVM that has not yet planned a query nor compiled its code does both
slowly: the first batch of a fresh run spends seconds in Spark's planner,
in generating and compiling the query's code, and in the JIT making both
fast. Records that arrive meanwhile wait. In Real-Time Mode the planner
runs again at each checkpoint, too rarely for the JIT to compile it by
itself, so each checkpoint pauses longer than it needs to.

``warm_up`` runs the query's own plan, on empty stand-ins for its streaming
sources, as batch jobs before the query starts: the same nodes, the same
expressions, the same sink encoding, so that the planner, the code generator
and the code they produce are warm when the first record is read. Nothing
is read from a streaming source and nothing is written (Spark's ``noop``
format); static tables the query joins are read as each batch reads them.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)


def empty_like(frame: DataFrame) -> DataFrame:
    """A batch DataFrame with ``frame``'s schema and no rows.

    Not a ``LocalRelation``: Spark would fold a plan over a known-empty
    relation away, and there would be nothing left to warm up."""
    spark = frame.sparkSession
    return spark.createDataFrame(spark.sparkContext.emptyRDD(), frame.schema)


def warm_up(twin: DataFrame, *, runs: int) -> float:
    """Plans and runs ``twin`` (a batch DataFrame) ``runs`` times into
    Spark's ``noop`` sink; the seconds it took."""
    began = time.monotonic()
    for _ in range(runs):
        twin.write.format("noop").mode("overwrite").save()
    return time.monotonic() - began


def stand_ins(sources: dict[str, Any]) -> dict[str, DataFrame]:
    """An empty batch DataFrame for each streaming source, by name."""
    return {name: empty_like(dataset.load()) for name, dataset in sources.items()}
