"""Processes of the development tools: ports, pids, logs, stopping."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HOST = "127.0.0.1"


class ProcessError(RuntimeError):
    """A detached service that does not start, or is not ours."""


def port_is_free(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Kafka sets SO_REUSEADDR too, so a port in TIME_WAIT counts as free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_ports(count: int, host: str = HOST) -> list[int]:
    """``count`` distinct free ports (each socket held until all are chosen),
    below the range the system gives outgoing connections their ports from:
    a port from there (what binding port 0 gives) can be taken by any
    client's connection before the service binds it."""
    below = _ephemeral_ports_start()
    candidates = list(range(_LOWEST, below))
    random.shuffle(candidates)
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for port in candidates:
            sock = stack.enter_context(
                socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            )
            try:
                sock.bind((host, port))
            except OSError:
                continue  # taken
            ports.append(port)
            if len(ports) == count:
                return ports
        raise ProcessError(f"no {count} free ports from {_LOWEST} to {below - 1}")


# Ports below it are left to services listening on a fixed one (the
# defaults, a user's own).
_LOWEST = 20_000


def _ephemeral_ports_start() -> int:
    """Where the ports of outgoing connections begin (Linux's setting;
    32768, its default, elsewhere)."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return max(int(text.split()[0]), _LOWEST + 1000)
    except (OSError, ValueError, IndexError):
        return 32_768


# The ports the project's services take unless told otherwise: a second
# session of tests, or a test beside a user's own services, must not need them.
DEFAULT_PORTS = {
    9092: "Kafka's PLAINTEXT listener (broker start, docker compose)",
    9093: "Kafka's SSL listener (broker start --tls)",
    9094: "Kafka's mutual TLS listener (broker start --tls)",
    9095: "Kafka's SASL_SSL listener (broker start --tls)",
    9464: "a run's Prometheus metrics (metrics_port)",
    4040: "a run's Spark UI (spark_ui_port)",
    8081: "the schema registry (registry start)",
    7077: "the Spark standalone master (cluster start)",
    15002: "the Spark Connect server (connect start)",
}


@contextlib.contextmanager
def hold_ports(ports, host: str = HOST):
    """Binds and listens on each of ``ports`` that is free until the block
    ends, so that anything else binding one fails; yields the held ports."""
    with contextlib.ExitStack() as stack:
        held = []
        for port in ports:
            sock = stack.enter_context(socket.socket())
            try:
                sock.bind((host, port))
            except OSError:
                continue
            sock.listen()
            held.append(port)
        yield held


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file ('' if missing)."""
    if lines <= 0:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            # Read a bounded chunk from the end; Kafka log lines are short.
            fh.seek(max(0, size - lines * 1024))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def pid_alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie (exited but not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # No procfs (macOS): trust kill(0).
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def pid_cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline")
            .read_bytes()
            .replace(b"\0", b" ")
            .decode(errors="replace")
        )
    except OSError:
        pass
    try:  # No procfs (macOS).
        out = subprocess.run(
            ["ps", "-p", str(pid), "-o", "command="],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return ""
    return out.stdout


def terminate(pid: int, grace: float, proc: subprocess.Popen | None = None) -> None:
    """Sends SIGTERM, waits up to ``grace`` seconds, then SIGKILLs ``pid``;
    reaps ``proc`` (our own child), if given."""

    def alive() -> bool:
        return proc.poll() is None if proc is not None else pid_alive(pid)

    for sent, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
        if not alive():
            break
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sent)
        end = time.monotonic() + wait
        while alive() and time.monotonic() < end:
            time.sleep(0.05)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def say(line: object, file=None) -> None:
    stream = file or sys.stdout
    stream.write(f"{line}\n")
    stream.flush()


def write_private(path: Path, data: bytes) -> None:
    """Writes ``data`` (keys, passwords) for ``path``'s owner's eyes only."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_bytes(data)


# Detached services keep their state in a JSON file of their data folder:
# ``processes`` lists each one's pid, log and a marker its command line holds
# (a pid reused by another program is not ours to stop).
def read_state(data_dir: Path, state_file: str) -> dict | None:
    try:
        return json.loads((data_dir / state_file).read_text())
    except (OSError, ValueError):
        return None


def write_state(data_dir: Path, state_file: str, state: dict) -> None:
    partial = data_dir / f"{state_file}.tmp"
    partial.write_text(json.dumps(state, indent=2) + "\n")
    partial.replace(data_dir / state_file)  # readers never see half a file


def _ours(process: dict) -> bool:
    return pid_alive(process["pid"]) and process["marker"] in pid_cmdline(
        process["pid"]
    )


def processes_alive(state: dict) -> bool:
    """Whether every recorded process still runs what we started."""
    return all(_ours(process) for process in state.get("processes", []))


def processes_status(data_dir: Path, state_file: str) -> dict:
    """The recorded state, with ``running``."""
    state = read_state(data_dir, state_file) or {}
    return {**state, "running": bool(state) and processes_alive(state)}


def stop_processes(state: dict, grace: float = 20) -> None:
    for process in reversed(state.get("processes", [])):  # the last started first
        if _ours(process):
            terminate(process["pid"], grace)


def stop_recorded(data_dir: Path, state_file: str, grace: float = 20) -> dict | None:
    """Stops what ``state_file`` records, if it runs; returns that state."""
    state = read_state(data_dir, state_file)
    if state:
        stop_processes(state, grace)
        (data_dir / state_file).unlink(missing_ok=True)
    return state


def wait_until_ready(ready, timeout: float, process: dict) -> None:
    """Waits for ``ready()``; fails with the log's end if the process exits
    or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while not ready():
        if not pid_alive(process["pid"]):
            raise ProcessError(
                f"{process['marker']} exited; {process['log']} ends with:\n"
                + tail(Path(process["log"]), 30)
            )
        if time.monotonic() > deadline:
            raise ProcessError(
                f"{process['marker']} not ready in {timeout:g} s; {process['log']} "
                "ends with:\n" + tail(Path(process["log"]), 30)
            )
        time.sleep(0.5)
