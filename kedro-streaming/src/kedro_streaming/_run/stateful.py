"""What Spark refuses or gets stuck on in a query's ``transformWithState``,
found in its plan before the query starts.

Spark says the first only when the query's first batch runs (a state store
other than RocksDB) and the second never (processing-time timers keep a
bounded run going: Spark runs a batch at every trigger to fire them, so an
``availableNow`` query never ends).
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any

from kedro_streaming._spark import java_frame

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
# transformWithState's node in an analysed plan, and its time mode:
# `TransformWithStateInPySpark <udf>, ..., Append, ProcessingTime, python_row, ...`
# (TransformWithStateInPandas on Spark 4.0, TransformWithState in Scala).
_OPERATOR = re.compile(r"TransformWithState\w*\b(.*)")


def transform_with_state_modes(frame: Any) -> list[str]:
    """The time mode (``None``, ``ProcessingTime``, ``EventTime``) of each
    ``transformWithState`` in the DataFrame's plan; ``[]`` over Spark
    Connect, where the server checks it."""
    jframe = java_frame(frame)
    if jframe is None:
        return []
    plan = jframe.queryExecution().analyzed().toString()
    modes = []
    for match in _OPERATOR.finditer(plan):
        found = re.search(r"\b(ProcessingTime|EventTime|NoTime|None)\b", match[1])
        modes.append(found[1] if found else "None")
    return modes


def transform_with_state_problem(
    spark: Any, frame: Any, *, bounded: bool
) -> str | None:
    """Why the query's ``transformWithState`` cannot run as configured, with
    the fix; ``None`` if it can (or the query has none).

    Args:
        spark: The run's session (its state store setting).
        frame: The sink's DataFrame.
        bounded: Whether the query runs with an ``availableNow`` or ``once``
            trigger (``--params trigger=available_now``).
    """
    modes = transform_with_state_modes(frame)
    if not modes:
        return None
    provider = spark.conf.get(PROVIDER, "")
    if provider != ROCKSDB:
        return (
            f"its transformWithState keeps its state in RocksDB only, and {PROVIDER} "
            f"is '{provider or 'Spark’s default'}'. Set it to {ROCKSDB} in "
            "conf/base/spark.yml, as a new project has it"
        )
    if importlib.util.find_spec("google.protobuf") is None:
        return (
            "its transformWithState runs Python workers that speak protobuf to "
            "Spark's state server, and this Python has no protobuf: "
            "pip install protobuf (a new project's requirements.txt has it)"
        )
    if bounded and "ProcessingTime" in modes:
        return (
            "its transformWithState has processing-time timers (timeMode "
            "ProcessingTime, which a time to live needs too), for which Spark runs "
            "a batch at every trigger, data or not: with an availableNow trigger "
            "the query would never end. Run it continuously (without `--params "
            "trigger=available_now`; Ctrl-C or SIGTERM stops it cleanly), or give "
            "the processor EventTime timers"
        )
    return None


def missing_api_problem(error: BaseException, spark_version: str) -> str | None:
    """What a node's AttributeError for ``transformWithState`` means on a Spark
    line without it, and the fix; ``None`` for any other error."""
    if not isinstance(error, AttributeError) or "'transformWithState" not in str(error):
        return None
    return (
        f"{error}: Spark {spark_version} has no such method. The row-based "
        "transformWithState came with Spark 4.1; Spark 4.0 has "
        "transformWithStateInPandas (the same StatefulProcessor, with pandas "
        "DataFrames in and out). Use it, or move the project to Spark 4.1 or "
        "later (docs/spark-lines.md)"
    )
