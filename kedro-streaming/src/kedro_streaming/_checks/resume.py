"""What a deploy does to each query that has a checkpoint: it resumes as it
is, resumes with changes (each said), or needs a reset (each reason said,
with its fix). ``kedro streams validate`` prints the verdict of every query;
``kedro run`` refuses exactly the queries that need a reset, before any
starts.

Spark's checkpoint says how many sources a query read (by name, once they
are named), its state's schemas and partitions; the run's record of the
query (``query_record``) says the rest: which topic or folder each source
read, the size of each window, each watermark's delay, where the sink wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kedro_streaming._checkpoint import Checkpoint, Offsets
from kedro_streaming._checks.query_record import query_record, recorded
from kedro_streaming._checks.sink_schemas import check_sink_schema, reset_fix
from kedro_streaming._connectors.streams import (
    SOURCE_EVOLUTION,
    names_sources,
    source_name,
)
from kedro_streaming._spark import java_frame, plan_nodes

AFRESH = "starts afresh"
AS_IS = "resumes as it is"
CHANGED = "resumes, with changes"
RESET = "needs a reset"
_SHUFFLE = "spark.sql.shuffle.partitions"


@dataclass
class Verdict:
    """One query's verdict: ``kind`` is one of the four above."""

    kind: str
    notes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    committed: int | None = None
    # What the run records of the query once it starts (``query_record``).
    record: dict[str, Any] | None = None

    def describe(self, name: str, readers: list[str] = ()) -> str:
        """The verdict in one line, as ``validate`` prints it before the
        notes and problems.

        Example:
            >>> Verdict(AS_IS, committed=3).describe("summary")
            'query summary: ok, resumes as it is after batch 3'
            >>> Verdict(RESET, reasons=["..."]).describe("trips", ["summary"])
            "query trips: needs a reset, said below: `kedro streams reset trips` (and of 'summary', which reads it)"
        """
        if self.kind == RESET:
            also = (
                f" (and of {', '.join(map(repr, readers))}, which "
                f"read{'s' if len(readers) == 1 else ''} it)"
                if readers
                else ""
            )
            return (
                f"query {name}: needs a reset, said below: `kedro streams reset "
                f"{name}`{also}"
            )
        if self.kind == AFRESH:
            return f"query {name}: ok, starts afresh"
        after = "" if self.committed is None else f" after batch {self.committed}"
        if self.kind == AS_IS:
            return f"query {name}: ok, resumes as it is{after}"
        return f"query {name}: ok, resumes{after} with the changes noted"


def resume_verdict(
    name: str,
    dataset: Any,
    frame: Any,
    sources: dict[str, Any],
    *,
    project: Path | None,
) -> Verdict:
    """Compares sink ``name``'s query, built as ``frame`` reading ``sources``,
    with its checkpoint and committed data."""
    check = check_sink_schema(name, dataset, frame)
    reasons, notes = list(check.problems), list(check.notes)
    checkpoint = Checkpoint(dataset.checkpoint) if dataset.checkpoint else None
    offsets = checkpoint.last_offsets() if checkpoint else None
    now = query_record(name, dataset, frame, sources, project=project)
    if offsets is not None:
        before = recorded(dataset.checkpoint) or {}
        spark = frame.sparkSession
        found = [
            _sources(frame, offsets, before, now, spark),
            _windows(before, now),
            _aggregates(before, now),
            _sink(name, before, now, checkpoint.committed),
            _partitions(checkpoint, offsets, spark),
        ]
        for more_reasons, more_notes in found:
            reasons += [
                r if " Fix: " in r else f"{r}. Fix: {reset_fix(name)}"
                for r in more_reasons
            ]
            notes += more_notes
        notes += _watermarks(before, now)
        notes += _versions(before, now)
    committed = checkpoint.committed if checkpoint else None
    if reasons:
        kind = RESET
    elif offsets is None:
        kind = AFRESH
    else:
        kind = CHANGED if notes else AS_IS
    return Verdict(kind, notes, reasons, committed, now)


Found = tuple[list[str], list[str]]  # reasons for a reset, notes


def _sources(
    frame: Any, offsets: Offsets, before: dict, now: dict, spark: Any
) -> Found:
    if offsets.named != names_sources(spark):
        return [_evolution_changed(offsets.named)], []
    planned = sorted(now["sources"])
    if offsets.named:
        by_name = {source_name(n): n for n in planned}
        old = sorted(by_name.get(n, n) for n, _ in offsets.sources if n)
    elif "sources" in before:
        old = sorted(before["sources"])
    else:  # recorded by Spark alone: how many, not which
        count = _streaming_sources(frame, len(planned))
        if count == len(offsets.sources):
            return [], []
        return [
            f"has a checkpoint that holds the offsets of {len(offsets.sources)} "
            f"source(s), and its query now reads {count}: {_NO_EVOLUTION}"
        ], []
    added = [n for n in planned if n not in old]
    removed = [n for n in old if n not in planned]
    moved = [
        f"read {before['sources'][n]} as '{n}', which now reads "
        f"{now['sources'][n]}: its checkpoint holds the offsets of what it read"
        for n in planned
        if before.get("sources", {}).get(n, now["sources"][n]) != now["sources"][n]
    ]
    if not (added or removed):
        return moved, []
    change = _listed("now reads", added) + _listed("no longer reads", removed)
    if offsets.named:
        notes = [
            f"{' and '.join(change)}: its state is kept (Spark's named sources), "
            "and a new source is read from its starting offsets"
        ]
        return moved, notes
    return moved + [f"{' and '.join(change)}: {_NO_EVOLUTION}"], []


_NO_EVOLUTION = (
    "Spark refuses a source added or removed over a checkpoint (at the first "
    "batch). On Spark 4.2 and later, a query whose sources are named from its "
    "first start keeps its state when one is added or removed (docs/operating.md, "
    '"Change a running stream")'
)


def _evolution_changed(named: bool) -> str:
    if named:
        return (
            "has a checkpoint that logs its sources by name, and "
            f"`{SOURCE_EVOLUTION}` is no longer true in conf/base/spark.yml: Spark would fail at the "
            "first batch. Put it back, with the offset log's format version 2"
        )
    return (
        "has a checkpoint that began without named sources, and "
        f"`{SOURCE_EVOLUTION}` is now true in conf/base/spark.yml: Spark would fail at the first batch "
        '("batch N doesn\'t exist"). Remove it, or start this query afresh'
    )


def _listed(verb: str, names: list[str]) -> list[str]:
    return [f"{verb} {', '.join(map(repr, names))}"] if names else []


def _streaming_sources(frame: Any, default: int) -> int:
    """How many streaming sources the plan reads (a dataset read twice, twice)."""
    jframe = java_frame(frame)
    if jframe is None:
        return default
    plan = jframe.queryExecution().analyzed()
    return sum(
        node.nodeName().startswith("StreamingRelation") for node in plan_nodes(plan)
    )


def _windows(before: dict, now: dict) -> Found:
    old, new = before.get("windows") or {}, now.get("windows") or {}
    old = {column: _as_recorded_now(old[column], new.get(column)) for column in old}
    return [
        f"would now make `{column}` windows of {size}, and its state holds "
        f"windows of {old[column]}: they would be finished and written beside "
        "the new ones"
        for column, size in sorted(new.items())
        if column in old and old[column] != size
    ], []


# Up to 0.16.1, a session window's time was recorded as the conversion Spark
# puts around it, and a gap per row (an expression) not at all.
_SESSION_TIME_BEFORE = " over precisetimestampconversion"


def _as_recorded_now(recorded: str, now: str | None) -> str:
    """A window as an earlier version recorded it, in today's words where
    they are known (a gap it did not record: taken as unchanged)."""
    if now is None or not recorded.endswith(_SESSION_TIME_BEFORE):
        return recorded
    sizes = recorded.removesuffix(_SESSION_TIME_BEFORE)
    return f"{sizes} over {now.rsplit(' over ', 1)[-1]}" if sizes else now


def _aggregates(before: dict, now: dict) -> Found:
    """A value kept in state computed otherwise: Spark would add the new to
    what the state holds (a record without them: not compared)."""
    old, new = before.get("aggregates"), now.get("aggregates") or {}
    return [
        f"would now compute `{column}` as {text}, and its state holds it as "
        f"{old[column]}: the groups open in its state would combine the two"
        for column, text in sorted(new.items())
        if old and column in old and old[column] != text
    ], []


def _watermarks(before: dict, now: dict) -> list[str]:
    old, new = before.get("watermarks") or {}, now.get("watermarks") or {}
    notes = [
        f"now keeps its watermark on `{column}` {delay} behind the latest event "
        f"time, where it was {old[column]}: from its next batch (the watermark "
        "its checkpoint reached never goes back)"
        for column, delay in sorted(new.items())
        if column in old and old[column] != delay
    ]
    if old and new and not set(old) & set(new):
        notes.append(
            f"now has its watermark on `{'`, `'.join(new)}`, where it was on "
            f"`{'`, `'.join(old)}`: the watermark its checkpoint reached carries on"
        )
    return notes


def _sink(name: str, before: dict, now: dict, committed: int | None) -> Found:
    old, new = before.get("sink"), now["sink"]
    if not old:
        return [], []
    reasons, notes = [], []
    if old["where"] != new["where"]:
        if new["where"].startswith("Kafka"):
            notes.append(
                f"now writes to {new['where']}, where it wrote to {old['where']}"
            )
        else:
            batches = "" if committed is None else f" (batches 0 to {committed})"
            reasons.append(
                f"wrote to {old['where']}, and would now write to {new['where']}: "
                f"its checkpoint counts what it wrote{batches} as written, so the "
                f"new place would lack it. Fix: move {old['where']} there (its "
                f"files and their log together), or {reset_fix(name)}"
            )
    if old["partition_by"] != new["partition_by"]:
        reasons.append(
            f"was partitioned by {old['partition_by'] or 'nothing'}, and would now "
            f"be by {new['partition_by'] or 'nothing'}: its folder would hold both "
            "layouts"
        )
    return reasons, notes


def _partitions(checkpoint: Checkpoint, offsets: Offsets, spark: Any) -> Found:
    """Spark keeps a checkpoint's shuffle partitions in its offset log, and a
    query goes on with them; a log by name (Spark 4.2) does not keep them,
    and the state's partitions (its folders) must match the session's."""
    asked = spark.conf.get(_SHUFFLE, None)
    kept = (offsets.metadata.get("conf") or {}).get(_SHUFFLE)
    if kept is None and offsets.named and checkpoint.state_operators():
        split = checkpoint.state_partitions(checkpoint.state_operators()[0])
        if asked is not None and split and str(split) != str(asked):
            return [
                f"has its state split in {split} partitions, and {_SHUFFLE} is now "
                f"{asked}: a checkpoint whose sources are named (Spark 4.2) does not "
                "keep the number, so the keys would be looked for in other "
                f"partitions. Fix: set {_SHUFFLE} back to {split}"
            ], []
        return [], []
    if kept is None or asked is None or str(kept) == str(asked):
        return [], []
    return [], [
        f"keeps its checkpoint's {kept} shuffle partitions (its state is split "
        f"so): {_SHUFFLE} {asked} applies to new checkpoints only"
    ]


def _versions(before: dict, now: dict) -> list[str]:
    old = before.get("spark")
    if not old or _line(old) == _line(now["spark"]):
        return []
    return [f"last ran on Spark {old}, and now runs on {now['spark']}"]


def _line(version: str) -> str:
    return ".".join(version.split(".")[:2])
