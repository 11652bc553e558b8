"""How long a `kedro run` of the example takes to reach its first query:
from the process's start to the end of its checks before start, with the
JVM started ahead (while Kedro builds the catalog and pipelines, as 0.9.6
does) and without (after them, as before), alternating.

Each run is `kedro run --params trigger=available_now` in the benchmark's
project (run `batch.py` first), from empty tables and checkpoints; the
process exits as soon as the checks have passed, so nothing is read.

    python benchmarks/startup.py [--rounds 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from batch import bench_project, timed

# Runs in the project's virtualenv: `kedro run`, timed to the end of its
# checks; AHEAD=0 leaves the JVM to start when the run needs its session.
_RUN_TO_THE_CHECKS = """
import functools, os, sys, time
began = time.monotonic()
from kedro_streaming._run import hooks
from kedro_streaming._session import session
if os.environ["AHEAD"] == "0":
    session.start_jvm_ahead = lambda: None
checks = hooks.StreamingQueryHooks.before_pipeline_run

@functools.wraps(checks)  # keeps Kedro's hook marker
def then_exit(self, *args, **kwargs):
    checks(self, *args, **kwargs)
    print(f"CHECKED {time.monotonic() - began:.2f}", flush=True)
    os._exit(0)

hooks.StreamingQueryHooks.before_pipeline_run = then_exit
from kedro.framework.cli.cli import main
sys.argv = ["kedro", "run", "--params", "trigger=available_now"]
main()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--workdir", type=Path, default=Path("/tmp/kedro-streaming-bench")
    )
    args = parser.parse_args()
    project, python = bench_project(args.workdir)
    seconds: dict[str, list[float]] = {"ahead": [], "after": []}
    for _ in range(args.rounds):
        for name, ahead in (("after", "0"), ("ahead", "1")):
            os.environ["AHEAD"] = ahead
            _, output = timed([python, "-c", _RUN_TO_THE_CHECKS], project, args.workdir)
            checked = float(output.split("CHECKED ", 1)[1].split()[0])
            seconds[name].append(checked)
            print(f"JVM started {name:5s} {checked:5.2f} s to the end of the checks")
    for name, values in seconds.items():
        listed = ", ".join(f"{value:.2f}" for value in values)
        print(f"{name}: {listed} s (median {statistics.median(values):.2f})")


if __name__ == "__main__":
    main()
