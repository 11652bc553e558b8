"""Where the time of a pause, or of a query's planning, goes: Spark's own figures.

A Real-Time Mode checkpoint pauses the stream from the end of one batch's
long-running job to the launch of the next one's first task. ``pauses`` splits
each pause with what Spark itself recorded:

- the Spark UI's REST API: the jobs (the long one of each batch, and the
  short ones before it) and the long job's stage (its first task's launch);
- the query's progress (``spark_durations_ms`` of the progress log): the
  commit log of the batch that ended, then the next batch's offsets
  (``latestOffset``), offset log (``walCommit``) and ``queryPlanning``;
- ``spark_instruments.py``, run in place of ``kedro``: the next batch's
  ``QueryPlanningTracker`` (analysis, optimization and physical planning,
  and the optimizer's rules), and the code generation counters sampled
  around the pause.

``planning_lines`` sums the trackers of a bounded run's batches per query.
"""

from __future__ import annotations

import json
import re
from urllib.request import urlopen

from latency import ui_time

# The optimizer rules named on a line: the slowest this many.
TOP_RULES = 4


def stage_launches(ui_url: str, stage_ids: list[int]) -> dict[int, dict]:
    """Each stage's submission and first task launch (the UI's REST API)."""
    with urlopen(f"{ui_url}/api/v1/applications", timeout=10) as answer:
        (application,) = json.load(answer)
    stages = {}
    for stage_id in stage_ids:
        with urlopen(
            f"{ui_url}/api/v1/applications/{application['id']}/stages/{stage_id}",
            timeout=30,
        ) as answer:
            (attempt, *_) = json.load(answer)
        stages[stage_id] = attempt
    return stages


def long_jobs(jobs: list[dict], query: str) -> dict[int, dict]:
    """Each batch's last job (its long-running one) of ``query``, by batch."""
    found: dict[int, dict] = {}
    for job in jobs:
        description = job.get("description") or ""
        batch = re.search(r"batch = (\d+)", description)
        if not description.startswith(query) or not batch:
            continue
        number = int(batch.group(1))
        if number not in found or job["jobId"] > found[number]["jobId"]:
            found[number] = job
    return found


def pauses(  # noqa: PLR0913, PLR0917
    jobs: list[dict],
    stages: dict[int, dict],
    progress: list[dict],
    instruments: dict | None,
    query: str,
) -> list[dict]:
    """Each pause of ``query`` between two long jobs, and its parts (ms)."""
    longest = long_jobs(jobs, query)
    spent = {b["batch"]: b.get("spark_durations_ms", {}) for b in progress}
    trackers = {
        b["batch"]: b
        for b in (instruments or {}).get("batches", [])
        if b["query"] == query
    }
    found = []
    for batch in sorted(longest)[1:]:
        before, job = longest.get(batch - 1), longest[batch]
        if before is None or "completionTime" not in before:
            continue
        ended = ui_time(before["completionTime"])
        submitted = ui_time(job["submissionTime"])
        stage = stages.get(max(job["stageIds"]), {})
        launched = (
            ui_time(stage["firstTaskLaunchedTime"])
            if stage.get("firstTaskLaunchedTime")
            else submitted
        )
        parts = {
            "commit log": spent.get(batch - 1, {}).get("commitOffsets"),
            "offsets": spent.get(batch, {}).get("latestOffset"),
            "offset log": spent.get(batch, {}).get("walCommit"),
        }
        tracker = trackers.get(batch)
        if tracker:
            parts.update(phase_times(tracker["phases"]))
        else:
            parts["planning"] = spent.get(batch, {}).get("queryPlanning")
        parts["short jobs"] = sum(
            1000 * (ui_time(j["completionTime"]) - ui_time(j["submissionTime"]))
            for j in jobs
            if j is not job
            and re.search(rf"batch = {batch}\b", j.get("description") or "")
            and (j.get("description") or "").startswith(query)
            and "completionTime" in j
        )
        parts.update(_codegen(instruments, ended, launched))
        parts["task launch"] = 1000 * (launched - submitted)
        found.append(
            {
                "batch": batch,
                "pause_ms": 1000 * (launched - ended),
                "parts": {k: v for k, v in parts.items() if v is not None},
                "rules": (tracker or {}).get("rules", []),
            }
        )
    return found


def phase_times(phases: dict[str, list[int]]) -> dict[str, int]:
    """Each planning phase's own ms: the tracker's optimization phase starts
    the (lazy) analysis, which it then holds; counted once, as analysis."""
    times = {p: end - start for p, (start, end) in phases.items() if p != "parsing"}
    inner, outer = phases.get("analysis"), phases.get("optimization")
    if inner and outer and outer[0] <= inner[0] and inner[1] <= outer[1]:
        times["optimization"] -= times["analysis"]
    return {p: times[p] for p in ("analysis", "optimization", "planning") if p in times}


def _codegen(instruments: dict | None, start: float, end: float) -> dict:
    """Code generated and compiled between ``start`` and ``end`` (epoch s),
    from the samples around them."""
    samples = (instruments or {}).get("samples", [])
    before = [s for s in samples if s[0] <= start]
    after = [s for s in samples if s[0] >= end]
    if not before or not after:
        return {}
    first, last = before[-1], after[0]
    return {
        "code generated": last[1] - first[1],
        "compiled": last[2] - first[2],
        "classes compiled": last[3] - first[3],
    }


def pause_lines(found: list[dict]) -> list[str]:
    """A line per pause: its parts, the rest, and the optimizer's slowest rules."""
    lines = []
    for number, pause in enumerate(found, 1):
        parts = dict(pause["parts"])
        classes = parts.pop("classes compiled", None)
        named = sum(v for v in parts.values())
        text = ", ".join(f"{k} {v:,.0f}" for k, v in parts.items())
        if classes is not None:
            text += f" ({classes:.0f} classes compiled, the rest from Spark's cache)"
        lines.append(
            f"checkpoint {number} (batch {pause['batch']}): pause "
            f"{pause['pause_ms']:,.0f} ms: {text}, the rest "
            f"{pause['pause_ms'] - named:,.0f}"
        )
        if pause["rules"]:
            lines.append("  " + rules_line(pause["rules"]))
    return lines


def rules_line(rules: list[list]) -> str:
    """The slowest rules (ms, invocations/effective), and what the rules that
    changed nothing cost."""
    idle = [r for r in rules if r[3] == 0]
    return (
        "rules: "
        + ", ".join(
            f"{name} {ns / 1e6:.1f} ({calls}/{effective})"
            for name, ns, calls, effective in rules[:TOP_RULES]
        )
        + f"; {len(idle)} of {len(rules)} changed nothing, "
        f"{sum(r[1] for r in idle) / 1e6:.1f} ms"
    )


def planning_lines(instruments: dict) -> list[str]:
    """Per query of a bounded run: its batches' planning phases, summed, and
    its rules; then the code generated and compiled in the whole run."""
    per_query: dict[str, dict] = {}
    for batch in instruments.get("batches", []):
        query = per_query.setdefault(
            batch["query"], {"batches": 0, "phases": {}, "rules": {}}
        )
        query["batches"] += 1
        for phase, ms in phase_times(batch["phases"]).items():
            query["phases"][phase] = query["phases"].get(phase, 0) + ms
        for name, ns, calls, effective in batch["rules"]:
            was = query["rules"].get(name, [name, 0, 0, 0])
            query["rules"][name] = [
                name,
                was[1] + ns,
                was[2] + calls,
                was[3] + effective,
            ]
    lines = []
    for name, query in per_query.items():
        phases = ", ".join(
            f"{phase} {query['phases'][phase]:,}"
            for phase in ("analysis", "optimization", "planning")
            if phase in query["phases"]
        )
        rules = sorted(query["rules"].values(), key=lambda r: -r[1])
        lines.append(f"{name}, {query['batches']} batches planned: {phases} ms")
        lines.append("  " + rules_line(rules))
    samples = instruments.get("samples", [])
    if samples:
        last = samples[-1]
        lines.append(
            f"code generated {last[1]:,.0f} ms, compiled {last[2]:,.0f} ms "
            f"({last[3]:.0f} classes) in the whole run"
        )
    return lines
