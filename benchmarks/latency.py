"""Latency by phase of a run, and the pauses Spark's own events show.

A user feels a stream's latency in three places: the first seconds after a
start, the neighbourhood of each checkpoint (a Real-Time Mode batch's end),
and the steady state between them. ``phase_lines`` reports each apart, from
(produced at, latency) pairs; ``spark_jobs`` reads the jobs of a run (the
Spark UI's REST API), whose pauses ``breakdown.py`` splits.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from urllib.request import urlopen

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
    rows: list[tuple[float, float]], batch_ends: tuple[float, ...] | list[float] = ()
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


def spark_jobs(ui_url: str) -> list[dict]:
    """Every job of the one application behind the Spark UI at ``ui_url``,
    from its REST API (no event log: writing one slows a start down)."""
    with urlopen(f"{ui_url}/api/v1/applications", timeout=10) as answer:
        (application,) = json.load(answer)
    with urlopen(
        f"{ui_url}/api/v1/applications/{application['id']}/jobs", timeout=30
    ) as answer:
        return json.load(answer)


def ui_time(text: str) -> float:
    """The UI's ``2026-11-27T08:26:35.103GMT`` as epoch seconds."""
    return (
        datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fGMT")
        .replace(tzinfo=timezone.utc)
        .timestamp()
    )
