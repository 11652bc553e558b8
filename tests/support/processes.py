"""Starting `kedro run` in the background, and crashing it (SIGKILL of the
run and its Spark).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from support.common import BOUNDED, quiet_env


def children_of(pid: int) -> set[int]:
    """The processes ``pid`` started that still run (none once it is gone)."""
    children = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):  # the thread or process ended
            children |= set(map(int, (task / "children").read_text().split()))
    return children


def crash(process: subprocess.Popen, spark: set[int] = frozenset()) -> None:
    """SIGKILLs a run started by ``start_kedro``: its process group, and
    Spark's JVM with its Python workers, which the plugin starts in a group
    of their own (``spark``: those groups, seen while the run was alive;
    its children now are added). As close to a crash as it gets; returns
    once they are gone, so that no JVM of this run outlives it."""
    groups = {process.pid, *spark, *children_of(process.pid)}
    for group in groups:
        with contextlib.suppress(ProcessLookupError):  # gone, or not a group
            os.killpg(group, signal.SIGKILL)
    deadline = time.monotonic() + 30
    for pid in groups - {process.pid}:
        while _running(pid):
            assert time.monotonic() < deadline, f"process {pid} outlived SIGKILL"
            time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has exited; its parent has not reaped it


def run_until_then_kill(
    bin_dir: Path,
    project: Path,
    marker,
    log_path: Path,
    *args: str,
    command=None,
    state=lambda: "",
) -> None:
    """Starts a bounded `kedro run` (or ``command`` with its arguments),
    SIGKILLs its process group once ``marker`` is logged (or, for a function,
    once it returns true). ``state()`` says what a failure message should
    add to the log's end."""
    reached = marker if callable(marker) else lambda: marker in log_path.read_text()
    process = start_kedro(
        bin_dir, project, ["run", *args, *BOUNDED], log_path, command=command
    )
    spark: set[int] = set()  # known before the run may kill itself
    try:
        deadline = time.monotonic() + 300
        while not reached():
            spark |= children_of(process.pid)
            if process.poll() is not None:  # ended, or killed itself
                assert reached(), (
                    f"ended before {marker!r}:\n{log_path.read_text()[-4000:]}"
                    f"\n{state()}"
                )
                break
            assert time.monotonic() < deadline, f"never logged {marker!r}"
            time.sleep(0.05 if callable(marker) else 0.2)
    finally:
        crash(process, spark)
        process.wait(timeout=60)


def start_kedro(bin_dir: Path, project: Path, args: list, log: Path, command=None):
    """Starts `kedro <args>` (or ``command`` with them) in ``project``, in a
    process group of its own, its output in ``log``."""
    return subprocess.Popen(
        [*(command or [bin_dir / "kedro"]), *args],
        cwd=project,
        env=quiet_env(),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def start_continuous_kafka_run(
    bin_dir: Path, project: Path, log_path: Path, *args: str, params: str = ""
) -> subprocess.Popen:
    """`kedro run --env kafka` at a 1-second trigger (and ``params``), its
    output in ``log_path``, in a process group of its own (so that a test can
    kill it whole)."""
    with log_path.open("w") as log:
        return subprocess.Popen(
            [
                bin_dir / "kedro",
                "run",
                "--env",
                "kafka",
                *args,
                "--params",
                ",".join(filter(None, ["trigger_interval=1 second", params])),
            ],
            cwd=project,
            env=quiet_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for(
    condition, process: subprocess.Popen, log: Path, what: str, seconds: float = 180
) -> None:
    """Polls ``condition`` while the run started by ``start_kedro`` lives.
    Past ``seconds``, fails with the log's end and where Spark's query
    threads stood (a stalled run and a slow one look alike from outside)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None, f"the run ended:\n{log.read_text()[-5000:]}"
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out waiting for {what} after {seconds:.0f} s\n"
                f"{query_threads(process.pid, log)}\n{log.read_text()[-5000:]}"
            )
        time.sleep(0.5)


def query_threads(pid: int, log: Path) -> str:
    """The stacks of the streaming queries' threads and of the tasks running
    in the run's JVMs; the whole dump goes beside ``log``."""
    dumps = []
    for child in _descendants(pid):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{child}/comm").read_text().strip() != "java":
                continue
        dumps.append(
            subprocess.run(
                ["jcmd", str(child), "Thread.print"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            ).stdout
        )
    whole = "\n".join(dumps)
    if not whole:
        return "(no JVM of the run to dump)"
    path = log.with_name(log.name + ".threads.txt")
    path.write_text(whole)
    stacks = [
        stack[:3000]
        for stack in whole.split("\n\n")
        if stack.startswith(('"stream execution thread', '"Executor task launch'))
    ]
    return f"thread dump: {path}\n" + "\n\n".join(stacks)


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        kids = children_of(todo.pop())
        todo += kids - found
        found |= kids
    return found
