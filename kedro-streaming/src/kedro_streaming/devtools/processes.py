"""Processes of the development tools: ports, pids, logs, stopping."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HOST = "127.0.0.1"


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
    """Returns ``count`` distinct free ports.

    All sockets are held open until every port is chosen so the OS cannot hand
    out the same port twice.  Another process could still grab one before the
    broker binds it; that race is accepted (the start error will say so).
    """
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(
                socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            )
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


def tail(path: Path, lines: int) -> str:
    """Returns the last ``lines`` lines of a text file ('' if missing)."""
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
    """Sends SIGTERM, waits up to ``grace`` seconds, then SIGKILLs ``pid``.

    When ``proc`` (our own child) is given it is also reaped, so no zombie is left.
    """

    def alive() -> bool:
        return proc.poll() is None if proc is not None else pid_alive(pid)

    if not alive():
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + grace
    while alive() and time.monotonic() < end:
        time.sleep(0.1)
    if alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        end = time.monotonic() + 10
        while alive() and time.monotonic() < end:
            time.sleep(0.05)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def say(line: object, file=None) -> None:
    stream = file or sys.stdout
    stream.write(f"{line}\n")
    stream.flush()
