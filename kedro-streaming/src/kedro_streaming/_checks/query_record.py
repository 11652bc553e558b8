"""What a query is, as far as its checkpoint cares: the sources it reads
(by catalog name), its watermarks, windows and stateful operators, and where
it writes. The run records it beside the checkpoint when the query starts
(``kedro-streaming.json``); the next deploy's checks compare with it what
Spark's own files do not say (a window's size, a watermark's delay, a
source's topic, a sink's folder).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyspark

from kedro_streaming._checkpoint import Checkpoint
from kedro_streaming._spark import java_frame, plan_nodes

# The record's layout; a later one is read as none (compared as if absent).
FORMAT = 1


def query_record(
    name: str,
    dataset: Any,
    frame: Any,
    sources: dict[str, Any],
    *,
    project: Path | None,
) -> dict[str, Any]:
    """What the run records of sink ``name``'s query built as ``frame``."""
    record: dict[str, Any] = {
        "format": FORMAT,
        "query": name,
        "plugin": _plugin_version(),
        "spark": pyspark.__version__,
        "sources": {
            source: where(entry, project) for source, entry in sorted(sources.items())
        },
        "sink": {
            "where": where(dataset, project),
            "partition_by": _partition_by(dataset),
        },
    }
    jframe = java_frame(frame)
    if jframe is not None:  # over Spark Connect the plan is the server's
        plan = jframe.queryExecution().analyzed()
        record["watermarks"] = watermarks(plan)
        record["windows"] = windows(plan)
        record["aggregates"] = aggregates(plan)
    return record


def _plugin_version() -> str:
    from kedro_streaming import __version__  # noqa: PLC0415 (the package's own)

    return __version__


def recorded(checkpoint: str | None) -> dict[str, Any] | None:
    """The record of the query that last started on ``checkpoint``."""
    if not checkpoint:
        return None
    record = Checkpoint(checkpoint).record()
    return record if record and record.get("format") == FORMAT else None


def write_record(checkpoint: str | None, record: dict[str, Any] | None) -> None:
    """Records the query that starts on ``checkpoint`` (after it started)."""
    if checkpoint and record:
        Checkpoint(checkpoint).write_record(record)


def where(entry: Any, project: Path | str | None) -> str:
    """Where an entry reads or writes, in a few words: a Kafka topic, or its
    format and folder (relative to the project if inside it, so that a
    project moved with its checkpoints is the same)."""
    identity = entry.connector.identity(entry)
    if identity:
        return identity
    path = entry.path or ""
    if project is not None and path:
        try:
            path = Path(path).resolve().relative_to(Path(project).resolve()).as_posix()
        except ValueError:
            pass  # outside the project: kept whole
    return f"{entry.file_format} {path}".strip()


def _partition_by(dataset: Any) -> list[str]:
    columns = dataset.partition_by or []
    return [columns] if isinstance(columns, str) else list(columns)


def watermarks(plan: Any) -> dict[str, str]:
    """Each ``withWatermark`` of the plan: its column and delay."""
    found = {}
    for node in plan_nodes(plan):
        if node.nodeName() == "EventTimeWatermark":
            line = node.simpleString(_FIELDS)
            found[node.eventTime().name()] = line.rsplit(", ", 1)[-1].strip()
    return found


def aggregates(plan: Any) -> dict[str, str]:
    """Each value a streaming aggregation keeps in its state, by its column:
    the SQL that computes it (``sum(fare)``). Its type alone is in Spark's
    state schema: ``sum(round(fare))`` over a state of ``sum(fare)`` resumes."""
    found = {}
    for node in plan_nodes(plan):
        if node.nodeName() != "Aggregate" or not node.isStreaming():
            continue
        grouping = node.groupingExpressions()
        keys = {grouping.apply(i).sql() for i in range(grouping.size())}
        outputs = node.aggregateExpressions()
        for i in range(outputs.size()):
            output = outputs.apply(i)
            computed = output.child() if output.nodeName() == "Alias" else output
            text = computed.sql()
            if output.nodeName() != "AttributeReference" and text not in keys:
                found[output.name()] = text
    return found


# How many fields of a node's line to print: all of them.
_FIELDS = 1000
# A window column's marks in Spark's metadata, and what the analysed plan
# keeps of its size: microsecond literals ("3600000000L"), or a session's gap
# added to its time ("at + CAST('5 minutes' AS INTERVAL)", or an expression
# for a gap per row); the time column inside the conversions around it.
_WINDOW_MARKS = ("spark.timeWindow", "spark.sessionWindow")
_MICROS = re.compile(r"\b(\d+)L\b")
_SESSION_GAP = re.compile(r"\+ CAST\((.+?) AS INTERVAL\)")
_TIME_COLUMN = re.compile(
    r"precisetimestampconversion\((?:precisetimestampconversion\()*(\w+)"
)


def windows(plan: Any) -> dict[str, str]:
    """Each time or session window the plan computes, by column name: its
    sizes (a sliding window's size and slide) and the time it windows.

    Spark's analysis has turned ``window("at", "1 hour")`` into arithmetic
    on microseconds; the sizes are its literals."""
    found = {}
    for node in plan_nodes(plan):
        if node.nodeName() not in ("Project", "Expand"):
            continue
        # Its columns' metadata in one call: a window column carries Spark's
        # mark. Most projections (the ingest query's: dozens of columns and
        # long expressions) have none, and their text is long to print (and
        # Spark warns on the console that it cut a schema printed in it).
        schema = node.schema().json()
        if not any(mark in schema for mark in _WINDOW_MARKS):
            continue
        if "precisetimestampconversion(" not in node.simpleString(_FIELDS):
            continue
        output = node.output()
        marked = [
            output.apply(i).name()
            for i in range(output.size())
            if any(m in output.apply(i).metadata().json() for m in _WINDOW_MARKS)
        ]
        expressions = node.expressions()
        texts = [expressions.apply(i).sql() for i in range(expressions.size())]
        text = " ".join(t for t in texts if "precisetimestampconversion(" in t)
        if not marked or not text:
            continue  # passed through from below, not computed here
        sizes = sorted({int(m) for m in _MICROS.findall(text) if int(m)}, reverse=True)
        gaps = dict.fromkeys(g.strip("'") for g in _SESSION_GAP.findall(text))
        described = [duration(micros) for micros in sizes] + list(gaps)
        column = _TIME_COLUMN.search(text)
        for name in marked:
            found[name] = ", ".join(described) + (
                f" over {column[1]}" if column else ""
            )
    return found


_UNITS = (
    (86_400_000_000, "day"),
    (3_600_000_000, "hour"),
    (60_000_000, "minute"),
    (1_000_000, "second"),
    (1_000, "millisecond"),
)


def duration(micros: int) -> str:
    """Microseconds in the largest unit that divides them.

    Example:
        >>> duration(3_600_000_000), duration(900_000_000), duration(1)
        ('1 hour', '15 minutes', '1 microsecond')
    """
    for size, unit in _UNITS:
        if micros % size == 0:
            count = micros // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{micros} microsecond{'s' if micros != 1 else ''}"
