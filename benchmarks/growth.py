"""How cost grows with the work: the bounded example at several sizes.

For each size (``--sizes``, trips), the landing folder of batch.py's project
is filled with that many time-ordered TLC-shaped trips, then, round after
round, the hand-written script (``handwritten.py --stage all``) and
``kedro run --params trigger=available_now`` run alternately on the same
data, same PySpark and spark.yml, every check on. Each run's wall time, time
per million trips, and peak memory: the JVM's (driver and executors in one
process under ``local[2]``) and the Python driver's, each its kernel high
water mark (``VmHWM``), read from /proc until the process ends.

With ``--plans light,project``, the project's own plan started by hand
(``handwritten.py --plan project``) runs in turn too: what ``kedro run`` adds
to the same work, beside what the project's plan does per record that the
light script does not.

    python benchmarks/growth.py [--sizes 100000,1000000,10000000] [--rounds 2]
                                [--plans light|project|light,project]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import threading
import time
from pathlib import Path

from batch import (
    BOUNDED,
    REAL_ZONES,
    bench_project,
    class_archive,
    fill_landing,
    handwritten_command,
    prepare_outputs,
)

# The scripts of --plans, by the name the table gives them.
NAMES = {"light": "hand-written", "project": "plan by hand"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000,10000000")
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--plans",
        default="light",
        help="the scripts, in turn: light (handwritten.py's typed read and one "
        "rule), project (the project's own nodes and rules by hand), or both: "
        "light,project",
    )
    parser.add_argument(
        "--workdir", type=Path, default=Path("/tmp/kedro-streaming-bench")
    )
    args = parser.parse_args()
    project, python = bench_project(args.workdir)
    kedro = [python.parent / "kedro", "run", *BOUNDED]
    archive = class_archive(project, python)
    scripts = {}
    for plan in args.plans.split(","):
        args.share_classes = False
        args.compare = {"light": "handwritten", "project": "plan"}[plan]
        scripts[NAMES[plan]] = handwritten_command(args, project, python, archive)
    table = []
    for size in (int(s) for s in args.sizes.split(",")):
        fill_landing(project, python, size, args.files, REAL_ZONES)
        measured(kedro, project, args.workdir)  # warm-up: page cache, archive
        for round_number in range(1, args.rounds + 1):
            runs = {
                name: measured([*script, "--stage", "all"], project, args.workdir)
                for name, script in scripts.items()
            }
            ours = measured(kedro, project, args.workdir)
            for name, hand in runs.items():
                table.append((size, round_number, name, hand, ours))
                print(
                    f"{size:>11,} round {round_number}: {name} {line(hand, size)}"
                    f" | kedro {line(ours, size)} | ratio {ours['s'] / hand['s']:.2f}",
                    flush=True,
                )
    print(f"\n{os.cpu_count()} cores, {args.files} files per size")
    print(
        "| trips | round | script | script s | kedro s | ratio | s per M (script, "
        "kedro) | JVM peak MiB (script, kedro) | Python peak MiB (script, kedro) |"
    )
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size, round_number, name, hand, ours in table:
        per_m = 1e6 / size
        print(
            f"| {size:,} | {round_number} | {name} | {hand['s']:.1f} | "
            f"{ours['s']:.1f} | {ours['s'] / hand['s']:.2f} | "
            f"{hand['s'] * per_m:.1f}, {ours['s'] * per_m:.1f} | "
            f"{hand['java']:.0f}, {ours['java']:.0f} | "
            f"{hand['python']:.0f}, {ours['python']:.0f} |"
        )


def line(run: dict, size: int) -> str:
    return (
        f"{run['s']:6.1f} s ({run['s'] * 1e6 / size:5.1f} s/M, JVM {run['java']:.0f}"
        f" MiB, Python {run['python']:.0f} MiB)"
    )


def measured(command: list, project: Path, workdir: Path) -> dict:
    """Runs ``command`` from empty outputs: wall seconds and the peak RSS
    (MiB) of its JVM and of its Python process."""
    prepare_outputs(project, workdir)
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true", "COLUMNS": "250"}
    started = time.monotonic()
    process = subprocess.Popen(
        [str(part) for part in command],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    peaks = {"java": 0, "python": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for pid, name in tree(process.pid):
                kind = "java" if name == "java" else "python"
                if kind == "java" or name == "kedro" or name.startswith("python"):
                    peaks[kind] = max(peaks[kind], high_water_kb(pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output = process.communicate()[0]
    seconds = time.monotonic() - started
    done.set()
    sampler.join()
    if process.returncode != 0:
        raise SystemExit(f"{command} failed:\n{output[-3000:]}")
    return {
        "s": seconds,
        "java": peaks["java"] / 1024,
        "python": peaks["python"] / 1024,
    }


def tree(root: int) -> list[tuple[int, str]]:
    """``root`` and its descendants, with their command names."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        names[int(entry.name)] = name
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in names:
            found.append((pid, names[pid]))
        todo += children.get(pid, [])
    return found


def high_water_kb(pid: int) -> int:
    try:
        for status in Path(f"/proc/{pid}/status").read_text().splitlines():
            if status.startswith("VmHWM:"):
                return int(status.split()[1])
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    main()
