"""Watermarks that would go silent, found in a query's plan before it starts.

A watermark advances only at a ``withWatermark`` of the query itself (an
``EventTimeWatermark`` node). A table written by a stream with a watermark
keeps Spark's mark on its event-time column, and a query that reads it back
sees the mark without ever advancing it: an aggregation in append mode then
writes nothing and keeps its state for ever, with no error. The plugin's
datasets read tables without that mark (``keep_watermark: true`` in a
source's load_args keeps it); a mark that reaches a stateful operator anyway
is refused here. One watermark over a union of streams drops the rows of
the stream that runs behind as late: said before start.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kedro_streaming._checks.stateful import source_names
from kedro_streaming._connectors.streams import WATERMARK_KEY
from kedro_streaming._spark import java_frame

# The analysed plan's operators that keep state across micro-batches (a
# join keeps state when both its sides are streams).
_STATEFUL = (
    "Aggregate",
    "Distinct",
    "Deduplicate",
    "DeduplicateWithinWatermark",
    "FlatMapGroupsWithState",
    "FlatMapGroupsInPandasWithState",
    "TransformWithState",
    "TransformWithStateInPandas",
    "TransformWithStateInPySpark",
)
# What an operator is called in a message.
_CALLED = {
    "Aggregate": "aggregation",
    "Distinct": "distinct",
    "Join": "join of two streams",
}


def _walk(plan: Any) -> Iterator[tuple[Any, bool]]:
    """Each node of an analysed plan, with whether a ``withWatermark`` of the
    query lies above it."""
    stack = [(plan, False)]
    while stack:
        node, watermarked = stack.pop()
        yield node, watermarked
        below = watermarked or node.nodeName() == "EventTimeWatermark"
        children = node.children()
        stack += [(children.apply(i), below) for i in range(children.size())]


def _stateful(node: Any) -> str | None:
    """What a streaming node keeps state as, or ``None`` if it keeps none."""
    name = node.nodeName()
    if not node.isStreaming():
        return None
    if name == "Join":
        both = node.left().isStreaming() and node.right().isStreaming()
        return _CALLED[name] if both else None
    if name in _STATEFUL:
        return _CALLED.get(name, name[0].lower() + name[1:])
    return None


def _marked(node: Any) -> list[str]:
    """The output columns of a node that carry a watermark mark."""
    output = node.output()
    return [
        output.apply(i).name()
        for i in range(output.size())
        if output.apply(i).metadata().contains(WATERMARK_KEY)
    ]


def _source(node: Any) -> str:
    return source_names([node.simpleString(1000)])


def inherited_watermark_problem(frame: Any) -> str | None:
    """A stateful operator over a watermark that the query never advances,
    inherited from a table read back; ``None`` if none (or over Spark
    Connect, where the plan is the server's)."""
    jframe = java_frame(frame)
    if jframe is None:
        return None
    nodes = list(_walk(jframe.queryExecution().analyzed()))
    if any(node.nodeName() == "EventTimeWatermark" for node, _ in nodes):
        return None  # the query advances a watermark of its own
    operators = [kind for node, _ in nodes if (kind := _stateful(node))]
    inherited = [
        (node, marked)
        for node, _ in nodes
        if node.children().size() == 0 and (marked := _marked(node))
    ]
    if not operators or not inherited:
        return None
    node, marked = inherited[0]
    columns = "`, `".join(marked)
    return (
        f"its {operators[0]} rests on the watermark of `{columns}`, inherited "
        f"from {_source(node)}, which a stream with withWatermark wrote: this "
        "query never advances that watermark, so its state would grow for ever "
        "and append mode would write nothing, without an error. Fix: "
        f'`.withWatermark("{marked[0]}", <delay>)` where the node reads it '
        "(and drop `keep_watermark: true` from that source's load_args, if "
        "set: the plugin reads a table without its writer's watermark)"
    )


def union_watermark_note(frame: Any) -> str | None:
    """One watermark over a union of streams, below a stateful operator: the
    rows of whichever stream runs behind are dropped as late; ``None`` if
    none (or over Spark Connect)."""
    jframe = java_frame(frame)
    if jframe is None:
        return None
    nodes = list(_walk(jframe.queryExecution().analyzed()))
    if not any(_stateful(node) for node, _ in nodes):
        return None
    for node, watermarked in nodes:
        if node.nodeName() != "Union" or not watermarked or not node.isStreaming():
            continue
        children = node.children()
        sides = [children.apply(i) for i in range(children.size())]
        streams = [side for side in sides if side.isStreaming()]
        if len(streams) < 2 or any(
            below.nodeName() == "EventTimeWatermark"
            for side in streams
            for below, _ in _walk(side)
        ):
            continue
        names = [
            ", ".join(
                _source(leaf)
                for leaf, _ in _walk(side)
                if leaf.children().size() == 0 and leaf.isStreaming()
            )
            for side in streams
        ]
        return (
            f"sets one watermark over a union of the streams reading "
            f"{' and '.join(names)}: it follows the newest event time of either, "
            "so the rows of the stream that runs behind (fewer events, or later "
            "to arrive) come later than the delay and are dropped as late rows, "
            "counted but not written. Give each stream its own withWatermark "
            "before the union: the query's watermark is then the slower "
            "stream's (spark.sql.streaming.multipleWatermarkPolicy: min, "
            "Spark's default) (docs/stateful.md)"
        )
    return None
