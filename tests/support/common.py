"""Names the tests share (paths, versions, logins, `--params`), and how they
run commands: `run`, `kedro run`, `kedro streams`, free ports.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import re
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

STARTER_ROOT = Path(__file__).resolve().parents[2]


SHARED_DATA = Path(
    os.environ.get(
        "STARTER_REFERENCE_DATA", STARTER_ROOT.parent / "shared" / "reference-data"
    )
)


# kedro-streaming, the plugin every generated project installs: its source,
# tests and docs; the repository's root is its distribution (pyproject.toml).
PLUGIN_ROOT = STARTER_ROOT / "kedro-streaming"


PLUGIN_SOURCE = PLUGIN_ROOT / "src"


PLUGIN_VERSION = re.search(
    r'__version__ = "([^"]+)"',
    (PLUGIN_SOURCE / "kedro_streaming" / "__init__.py").read_text(),
)[1]


PROJECT_NAME = "Taxi Rides"


# The Spark line the suite runs on: cookiecutter.json's default.
SPARK_VERSION = json.loads((STARTER_ROOT / "cookiecutter.json").read_text())[
    "spark_version"
]


PACKAGE = "taxi_rides"


# The SASL user of the test broker (PLAIN and SCRAM-SHA-512); tests check the
# password is never printed. Quotes, a backslash, a semicolon, a line break and
# non-ASCII: a JAAS configuration built without escaping would break on them,
# or take ` unsafe="1"` for an option of its own.
SASL_USER = "taxi-app"


SASL_PASSWORD = f'pw-{uuid.uuid4().hex}" unsafe="1\\;\nü'


# Azure Event Hubs' login shape: this user name, a connection string for password.
EVENT_HUBS_USER = "$ConnectionString"


EVENT_HUBS_PASSWORD = (
    "Endpoint=sb://local.servicebus.windows.net/;SharedAccessKeyName=send;"
    f"SharedAccessKey={uuid.uuid4().hex}="
)


# Bounded, and one landing file (or bronze file) per micro-batch, as the
# reference replays them: the watermark then advances file by file.
FILE_BY_FILE = "max_bytes_per_trigger=1"


BOUNDED = ["--params", f"trigger=available_now,{FILE_BY_FILE}"]


# Bounded, as shipped: whatever has landed is one micro-batch.
AS_SHIPPED = ["--params", "trigger=available_now"]


# The characters of a rejected message's raw payload (realtime/nodes.py).
RAW_PAYLOAD = 100_000


CHUNK = 60  # maxOffsetsPerTrigger: the reference replays batches of this many messages


# The driver's JIT of the tests' runs: the quick compiler only (C1), as a
# short run wants. Spark puts SPARK_SUBMIT_OPTS before spark.yml's
# extraJavaOptions, so the project's own options (the JIT directives file of
# conf/kafka among them) are still read and checked; only the optimising
# compiler (C2), whose warm-up a run of a few hundred rows never earns back,
# stays off. The JIT changes no result. Measured on the bounded example:
# 23 to 27 s a run against 31 to 32 s with the shipped tiers. A test that runs
# the shipped JIT as is sets SHIPPED_JIT first. C1 alone makes the JVM's code
# cache 48 MB, not the tiers' 240 MB, and spark.yml's -XX:-DontCompileHugeMethods
# fills it in a long run of several pipelines (a CI run of test_guarantees'
# Kafka-to-Delta run failed its MERGE with "Out of space in CodeCache for
# adapters"): the tiers' size is kept (address space reserved, not memory).
SHORT_RUN_JIT = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


# The JIT as shipped (the JVM's tiers and spark.yml's options): test_realtime's
# runs, and a project's own pytest, as a user's pytest has it. C1 alone saved
# nothing there (the taxi project's tests: 193 s against 195 s), and made
# Spark 4.0's transformWithStateInPandas slower (the spells recipe: 157 s
# against 131 s).
SHIPPED_JIT = {"SPARK_SUBMIT_OPTS": ""}


def quiet_env(**extra: str | None) -> dict[str, str]:
    """The environment of a command the tests run; an ``extra`` of None
    removes that variable."""
    # A wide console, so that Kedro's rich log lines (a progress line names
    # every expectation that caught a record) are not wrapped.
    env = {
        **os.environ,
        "KEDRO_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "1",
        "COLUMNS": "4000",
        # A run's endpoints on free ports, never the default ones (conftest.py):
        # conf/base/streaming.yml reads these unless --params sets the port.
        "KEDRO_STREAMS_METRICS_PORT": str(free_port()),
        "KEDRO_STREAMS_SPARK_UI_PORT": str(free_port()),
        "SPARK_SUBMIT_OPTS": os.environ.get("SPARK_SUBMIT_OPTS", SHORT_RUN_JIT),
    }
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return {name: value for name, value in env.items() if value is not None}


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port free now and never handed out before in this test session, by
    this process or (under xdist) by another worker of the same run.

    The kernel may give a port just released again: two calls in a row once
    returned the same one, and a run's Spark UI took its metrics port (CI).
    Chosen below the ports of outgoing connections: one of those (what
    binding port 0 gives) was once taken by a client's connection before
    the schema registry bound it (CI rehearsal).
    """
    with _ports_of_the_run() as handed_out:
        while True:
            port = random.randrange(20_000, _EPHEMERAL_START)
            if port in handed_out:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue  # taken
            handed_out.add(port)
            return port


def _ephemeral_start() -> int:
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return max(int(text.split()[0]), 21_000)
    except (OSError, ValueError, IndexError):
        return 32_768


_EPHEMERAL_START = _ephemeral_start()


@contextlib.contextmanager
def _ports_of_the_run():
    """The ports handed out so far: this process's, or the run's when xdist's
    workers share it (a file they take turns to read and add to)."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:
        yield _HANDED_OUT
        return
    path = Path(tempfile.gettempdir()) / f"starter-tests-ports-{run_id}"
    with open(path, "a+") as ports:
        fcntl.flock(ports, fcntl.LOCK_EX)
        ports.seek(0)
        handed_out = {int(line) for line in ports.read().split()}
        before = set(handed_out)
        yield handed_out
        ports.writelines(f"{port}\n" for port in handed_out - before)


@contextlib.contextmanager
def tool_service(tool: str, project: Path, project_bin: Path, data_dir: Path, *options):
    """Runs `kedro streams <tool> start` (cluster, connect) on a free port.

    Yields its address (the last word the command prints) and data folder;
    stops it on exit.
    """
    command = [project_bin / "kedro", "streams", tool]
    port = str(free_port())
    started = run(
        [*command, "start", "--data-dir", data_dir, "--port", port, *options],
        cwd=project,
        timeout=300,
    )
    try:
        yield {"address": started.stdout.split()[-1], "data_dir": data_dir}
    finally:
        run([*command, "stop", "--data-dir", data_dir], cwd=project, check=False)


def run(
    command: list,
    cwd: Path,
    timeout: float = 600,
    check: bool = True,
    env: dict[str, str] | None = None,
    **kwargs,
) -> subprocess.CompletedProcess:
    """Runs a command; unless ``check`` is false, fails the test when it fails.

    The result also has ``seconds`` (wall time) and ``output`` (stdout + stderr).
    """
    started = time.monotonic()
    result = subprocess.run(
        command,
        cwd=cwd,
        env=quiet_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,
    )
    result.seconds = time.monotonic() - started
    result.output = result.stdout + result.stderr
    _log_command(command, result.seconds)
    if check and result.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, command))} exited {result.returncode} in {cwd}\n"
            f"--- stdout ---\n{result.stdout[-8000:]}\n--- stderr ---\n{result.stderr[-8000:]}"
        )
    return result


def _log_command(command: list, seconds: float) -> None:
    """With STARTER_TESTS_COMMAND_LOG set, one line per command (the test,
    its wall time, the command's words after the program's path): where the
    suite's time goes. Commands carry no secret (credentials are files and
    environment variables)."""
    path = os.environ.get("STARTER_TESTS_COMMAND_LOG")
    if path:
        test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
        words = " ".join([Path(str(command[0])).name, *map(str, command[1:])])
        with open(path, "a") as log:
            log.write(f"{test}\t{seconds:.1f}\t{' '.join(words.split())[:300]}\n")


def kedro_run(
    bin_dir: Path,
    project: Path,
    *args: str,
    params=BOUNDED,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    return run(
        [bin_dir / "kedro", "run", *args, *params],
        cwd=project,
        timeout=600,
        check=check,
        env=env,
    )


def streams(
    bin_dir: Path, project: Path, *args: str, check: bool = True
) -> subprocess.CompletedProcess:
    """`kedro streams <args>` in ``project``."""
    return run([bin_dir / "kedro", "streams", *args], cwd=project, check=check)
