"""Latency by phase of a run, and the pauses Spark's own events show.

A user feels a stream's latency in three places: the first seconds after a
start, the neighbourhood of each checkpoint (a Real-Time Mode batch's end),
and the steady state between them. ``phase_lines`` reports each apart, from
(produced at, latency) pairs; ``checkpoint_pauses`` reads a run's Spark event
log for the time between one Real-Time Mode batch's last task and the next
one's first, with what the query's progress says it spent on.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

QUANTILES = (50, 95, 99)
# Messages produced this long before a batch's end, or after it, are in the
# checkpoint's neighbourhood: the pause delays those after the end, and the
# backlog it leaves takes about as long again to drain.
BEFORE_END, AFTER_END = 1.0, 3.0


def quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(latencies_ms: list[float]) -> str:
    """``p50 .., p95 .., p99 .., max .. ms (n)`` of unordered latencies."""
    if not latencies_ms:
        return "none"
    ordered = sorted(latencies_ms)
    return (
        ", ".join(f"p{q} {quantile(ordered, q / 100):,.0f}" for q in QUANTILES)
        + f", max {ordered[-1]:,.0f} ms ({len(ordered):,})"
    )


def phase_lines(
    rows: list[tuple[float, float]], batch_ends: list[float] = ()
) -> list[str]:
    """One line per phase of (produced at, latency ms) ``rows``: the first
    10 s and the first minute from the first message, each batch end's
    neighbourhood, and the rest (after the first 10 s; past the first minute,
    out of every neighbourhood)."""
    if not rows:
        return ["no message out"]
    first = min(at for at, _ in rows)

    def near(at: float) -> bool:
        return any(end - BEFORE_END <= at <= end + AFTER_END for end in batch_ends)

    lines = [
        "first 10 s: " + summary([ms for at, ms in rows if at < first + 10]),
        "first minute: " + summary([ms for at, ms in rows if at < first + 60]),
        "after 10 s: " + summary([ms for at, ms in rows if at >= first + 10]),
    ]
    for number, end in enumerate(batch_ends, 1):
        lines.append(
            f"checkpoint {number} (batch end at {end - first:.0f} s): "
            + summary(
                [ms for at, ms in rows if end - BEFORE_END <= at <= end + AFTER_END]
            )
        )
    lines.append(
        "steady (past the first minute"
        + (", out of checkpoints" if batch_ends else "")
        + "): "
        + summary([ms for at, ms in rows if at >= first + 60 and not near(at)])
    )
    return lines


def read_event_log(directory: Path) -> list[dict]:
    """Every event of the one application whose log is in ``directory``."""
    (log,) = [p for p in directory.iterdir() if p.is_dir() or p.suffix == ".zstd"]
    files = sorted(log.glob("events_*")) if log.is_dir() else [log]
    events = []
    for path in files:
        text = (
            subprocess.run(
                ["zstd", "-dc", path], check=True, capture_output=True
            ).stdout.decode()
            if path.suffix == ".zstd" or ".zstd" in path.name
            else path.read_text()
        )
        events += [json.loads(line) for line in text.splitlines() if line]
    return events


def checkpoint_pauses(events: list[dict], query: str) -> list[dict]:
    """Real-Time Mode's pause at each batch end of ``query``: from the end of
    one batch's long-running job to the start of the next one's, split into
    the time before the next batch's planned execution starts (commit of the
    finished batch, offsets, write-ahead log, planning: the next progress's
    ``durationMs`` says which), its short jobs (broadcasts) and the time left
    to submit the long job. Each as epoch seconds and ms."""
    executions: dict[int, str] = {}
    starts: dict[int, dict] = {}
    jobs = []  # (execution, start, end)
    progress = []
    for event in events:
        kind = event["Event"]
        if kind.endswith("SQLExecutionStart"):
            executions[event["executionId"]] = event.get("description", "")
            starts[event["executionId"]] = event
        elif kind == "SparkListenerJobStart":
            execution = int(event["Properties"].get("spark.sql.execution.id", -1))
            jobs.append(
                [execution, event["Submission Time"] / 1000, None, event["Job ID"]]
            )
        elif kind == "SparkListenerJobEnd":
            for job in jobs:
                if job[3] == event["Job ID"]:
                    job[2] = event["Completion Time"] / 1000
        elif (
            kind.endswith("QueryProgressEvent")
            and event["progress"].get("name") == query
        ):
            progress.append(event["progress"])
    ours = [j for j in jobs if executions.get(j[0], "").startswith(query) and j[2]]
    # Each batch's long job is its last; the ones before it are broadcasts.
    by_execution: dict[int, list] = {}
    for job in ours:
        by_execution.setdefault(job[0], []).append(job)
    batches = sorted(
        (sorted(found, key=lambda j: j[1]) for found in by_execution.values()),
        key=lambda found: found[-1][1],
    )
    # Two executions per batch (the write and its inner plan) share the jobs'
    # execution id only once: keep batches whose last job is a long one.
    batches = [b for b in batches if b[-1][2] - b[-1][1] > 1]
    pauses = []
    for number, (done, following) in enumerate(zip(batches, batches[1:]), 1):
        ended, started = done[-1][2], following[-1][1]
        short = following[:-1]
        planned = min(j[1] for j in following)
        # The finished batch's commit is in its own progress; the next
        # batch's offsets, log and planning in the next one.
        spent = (
            {
                "commitOffsets": progress[number - 1]["durationMs"].get(
                    "commitOffsets"
                ),
                **{
                    k: progress[number]["durationMs"].get(k)
                    for k in ("latestOffset", "walCommit", "queryPlanning")
                },
            }
            if number < len(progress)
            else {}
        )
        pauses.append(
            {
                "ended_at": ended,
                "pause_ms": 1000 * (started - ended),
                "until_execution_ms": 1000 * (planned - ended) if short else None,
                "short_jobs_ms": 1000 * (short[-1][2] - short[0][1]) if short else 0,
                "submit_ms": 1000 * (started - (short[-1][2] if short else ended)),
                "progress": spent,
            }
        )
    return pauses


def pause_line(pause: dict) -> str:
    spent = ", ".join(f"{k} {v}" for k, v in pause["progress"].items() if v is not None)
    return (
        f"pause {pause['pause_ms']:,.0f} ms: short jobs (broadcasts) "
        f"{pause['short_jobs_ms']:,.0f}, then {pause['submit_ms']:,.0f} to submit "
        f"the batch's job; the progress says {spent} ms"
    )
