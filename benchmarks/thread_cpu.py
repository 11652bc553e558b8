"""Where a long run's CPU goes: per process and per thread group, over a
window, and a JVM's own profile of the same window (Java Flight Recorder).

Thread names are grouped by dropping their numbers ("Executor task launch
worker for task 12.0 in stage 3.0 (TID 40)" and the next worker are one
group), and CPU is the kernel's count for each thread (``/proc``'s utime
and stime), so threads that end inside the window are not counted: Spark's
task threads live in a pool, and the pool's threads outlive a window.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

# The kernel counts CPU time in clock ticks.
TICKS = 100


def thread_cpu(pid: int) -> Counter:
    """CPU seconds so far of ``pid``'s live threads, by thread group."""
    groups: Counter = Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            name = (task / "comm").read_text().strip()
        except OSError:  # the thread ended while being read
            continue
        fields = stat.rsplit(")", 1)[1].split()
        groups[re.sub(r"[-#]?\d+", "#", name)] += (
            int(fields[11]) + int(fields[12])
        ) / TICKS
    return groups


def profile_window(pids: dict[str, int], seconds: float, jfr_to: Path | None) -> dict:
    """CPU seconds per process and thread group over the next ``seconds``;
    with ``jfr_to``, a Flight Recording of the process named ``jvm`` over
    the same window, written there."""
    if jfr_to is not None and "jvm" in pids and shutil.which("jcmd"):
        subprocess.run(
            ["jcmd", str(pids["jvm"]), "JFR.start", "settings=profile"]
            + [f"duration={int(seconds)}s", f"filename={jfr_to}"],
            capture_output=True,
            check=False,
        )
    before = {name: thread_cpu(pid) for name, pid in pids.items()}
    time.sleep(seconds)
    window = {}
    for name, pid in pids.items():
        if not Path(f"/proc/{pid}").exists():
            continue
        after = thread_cpu(pid)
        window[name] = {
            group: round(after[group] - before[name].get(group, 0.0), 2)
            for group in after
            if after[group] - before[name].get(group, 0.0) > 0
        }
    return window


def describe(window: dict, top: int = 6) -> str:
    """One line per process: its CPU seconds, then its busiest groups."""
    lines = []
    for process, groups in window.items():
        busiest = sorted(groups.items(), key=lambda item: -item[1])[:top]
        lines.append(
            f"  {process}: {sum(groups.values()):.1f} CPU s ("
            + ", ".join(f"{group} {cpu:.1f}" for group, cpu in busiest)
            + ")"
        )
    return "\n".join(lines)
