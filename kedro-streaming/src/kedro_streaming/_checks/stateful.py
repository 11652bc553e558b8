"""What Spark refuses, gets stuck on or lets grow in a query's state, found
in its plan before the query starts (Spark says it late, or never).
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any

from kedro_streaming._spark import java_frame, jvm_of, plan_nodes

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
# transformWithState's node in an analysed plan, and its time mode:
# `TransformWithStateInPySpark <udf>, ..., Append, ProcessingTime, python_row, ...`
# (TransformWithStateInPandas on Spark 4.0, TransformWithState in Scala).
_OPERATOR = re.compile(r"TransformWithState\w*\b(.*)")


def transform_with_state_modes(frame: Any) -> list[str]:
    """The time mode (``None``, ``ProcessingTime``, ``EventTime``) of each
    ``transformWithState`` in the plan; ``[]`` over Spark Connect."""
    jframe = java_frame(frame)
    if jframe is None:
        return []
    modes = []
    for node in plan_nodes(jframe.queryExecution().analyzed()):
        # The node's own line only: the whole plan's text costs up to 0.15 s.
        if not node.nodeName().startswith("TransformWithState"):
            continue
        match = _OPERATOR.search(node.simpleString(_FIELDS))
        found = match and re.search(
            r"\b(ProcessingTime|EventTime|NoTime|None)\b", match[1]
        )
        modes.append(found[1] if found else "None")
    return modes


# How many fields of an operator's line to print: all of them.
_FIELDS = 1000


def transform_with_state_problem(
    spark: Any, frame: Any, *, bounded: bool
) -> str | None:
    """Why the query's ``transformWithState`` cannot run as configured (with
    a bounded trigger if ``bounded``), with the fix; ``None`` if it can."""
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


# A line of a plan's tree string: its depth's prefix (":  " or "   " per
# level, then ":- " or "+- "), then the node; "~" marks a streaming node.
_TREE_LINE = re.compile(r"^((?:[: ]  )*(?:[:+]- )?)(.*)$")


def unwatermarked_join_note(frame: Any) -> str | None:
    """What a join of two streams keeps for ever: each side without a watermark
    (Spark never evicts its rows); ``None`` if none, or over Spark Connect."""
    jframe = java_frame(frame)
    if jframe is None:
        return None
    plan = jframe.queryExecution().analyzed()
    joins = jvm_of(frame.sparkSession).org.apache.spark.sql.catalyst.trees.TreePattern
    if not plan.containsPattern(joins.JOIN()):
        return None  # no join, no note: the plan's text is not printed for nothing
    lines = [
        (len(m[1]) // 3, m[2])
        for m in map(_TREE_LINE.match, plan.toString().splitlines())
    ]
    sides = []
    for index, (depth, node) in enumerate(lines):
        if not node.startswith("~Join "):
            continue
        below = []
        for child_depth, child in lines[index + 1 :]:
            if child_depth <= depth:
                break
            if child_depth == depth + 1:
                below.append([])
            below[-1].append(child)
        if len(below) == 2 and all(_streaming(side[0]) for side in below):
            sides += [
                source_names(side)
                for side in below
                if not any("EventTimeWatermark" in n for n in side)
            ]
    if not sides:
        return None
    which = (
        f"its side reading {sides[0]} has no watermark"
        if len(sides) == 1
        else f"its sides reading {' and '.join(sides)} have no watermark"
    )
    return (
        f"joins two streams, and {which}: Spark then evicts no row of either "
        "side from the join's state, which grows without bound (the "
        "KedroStreamStateGrowing alert fires after an hour of it). Give each "
        "side withWatermark, and the join a time bound on both sides' event "
        "times (docs/stateful.md)"
    )


def source_names(nodes: list[str]) -> str:
    """The streaming sources a part of a plan reads, as the plan names them."""
    found = []
    for node in nodes:
        if not node.startswith("StreamingRelation"):
            continue
        topics = re.search(r"\bsubscribe(?:Pattern)?=([^,\]]+)", node)
        found.append(
            f"Kafka topic {topics[1]}"
            if topics
            else re.split(r", \[|, ", node.split(" ", 1)[1], maxsplit=1)[0]
        )
    return ", ".join(found) or "a stream"


def _streaming(node: str) -> bool:
    # A streaming source's node is not marked "~", the nodes above it are.
    return node.startswith(("~", "StreamingRelation"))


# Spark's metadata key for a column's watermark, and the setting under which
# a second watermark on a stream is refused (its default).
_WATERMARK_KEY = "spark.watermarkDelayMs"
_MULTIPLE = "spark.sql.streaming.statefulOperator.allowMultiple"


def redefined_watermark_problem(spark: Any, frame: Any) -> str | None:
    """A ``withWatermark`` over a stream that already has one, which Spark
    refuses only at the query's first batch; ``None`` if none."""
    jframe = java_frame(frame)
    if jframe is None or spark.conf.get(_MULTIPLE, "true").strip().lower() != "true":
        return None
    for node in plan_nodes(jframe.queryExecution().analyzed()):
        if node.nodeName() == "EventTimeWatermark":
            output = node.child().output()
            marked = [
                output.apply(i).name()
                for i in range(output.size())
                if output.apply(i).metadata().contains(_WATERMARK_KEY)
            ]
            if marked:
                return (
                    f"sets a watermark on `{node.eventTime().name()}` over a stream "
                    f"that already has one (on `{'`, `'.join(marked)}`): Spark "
                    "refuses to redefine a watermark, at the query's first batch. "
                    "Keep one withWatermark per stream, where the node reads it; "
                    "over a table that a stream with a watermark wrote, the mark is "
                    "its writer's: read the table without it (no `keep_watermark: "
                    "true` in the source's load_args) and set this query's own "
                    "(docs/stateful.md)"
                )
    return None
