"""The broker of ``kedro streams broker start|status|stop|reset``: Apache Kafka
itself (KRaft mode) without Docker, detached, and recorded in
``<data_dir>/broker.json`` for the next command; its data folder keeps its
topics across restarts, as a compose volume."""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from kafka.errors import KafkaError

from kedro_streaming.devtools.broker_config import write_jaas_file
from kedro_streaming.devtools.broker_jars import (
    KAFKA_VERSION,
    BrokerError,
    cache_root,
    resolve_classpath,
    run_maven,
)
from kedro_streaming.devtools.local_kafka import LocalKafka, create_scram_users, probe
from kedro_streaming.devtools.processes import (
    HOST,
    free_ports,
    pid_alive,
    pid_cmdline,
    port_is_free,
    read_state,
    say,
    terminate,
    write_state,
)

__all__ = [
    "DATA_DIR",
    "KAFKA_VERSION",
    "STATE_FILE",
    "BrokerError",
    "LocalKafka",
    "cache_root",
    "create_scram_users",
    "free_ports",
    "pid_alive",
    "probe",
    "reset",
    "resolve_classpath",
    "run_maven",
    "running_plain_listener",
    "start",
    "status",
    "stop",
    "terminate",
    "write_jaas_file",
]

DATA_DIR = Path("data/kafka-broker")
STATE_FILE = "broker.json"


def running_plain_listener(data_dir: Path) -> str:
    """The PLAINTEXT listener of the broker ``start`` runs from ``data_dir``,
    else ``localhost:9092`` (the compose broker's)."""
    state = read_state(data_dir, STATE_FILE)
    if state is not None and _state_is_ours(state):
        return str(state["bootstrap_servers"])
    return "localhost:9092"


def _state_is_ours(state: dict) -> bool:
    """True if the recorded pid still runs the broker we started (its command
    line says so: a pid may be reused)."""
    pid = state.get("pid")
    if not isinstance(pid, int) or not pid_alive(pid):
        return False
    cmdline = pid_cmdline(pid)
    return "kafka.Kafka" in cmdline and str(state.get("properties_path")) in cmdline


@contextlib.contextmanager
def _locked(data_dir: Path):
    """Serialises the commands that use the same data folder."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / f"{STATE_FILE}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def start(
    data_dir: Path,
    port: int,
    *,
    sasl_users: Mapping[str, str] | None = None,
    sasl_port: int | None = None,
    heap: str = "512m",
    timeout: float = 90,
    tls_ports: Mapping[str, int] | None = None,
    port_origin: str = "--port",
) -> int:
    """Starts a detached broker on ``data_dir`` unless it runs; prints its
    address. ``tls_ports`` (``{"SSL": 9093, ...}``, 0: a free one) adds TLS
    listeners; ``port_origin`` says where ``port`` was read."""
    with _locked(data_dir):
        state = read_state(data_dir, STATE_FILE)
        if state and _state_is_ours(state):
            say(f"Kafka already runs (pid {state['pid']}).", file=sys.stderr)
            say(state["bootstrap_servers"])
            return 0
        if port and not port_is_free(port):
            raise BrokerError(port_taken(port, port_origin))
        kafka = LocalKafka(
            port=port or None,
            sasl_users=sasl_users or None,
            sasl_port=sasl_port,
            heap=heap,
            data_dir=data_dir,
            detach=True,
            tls=tls_ports is not None,
            tls_ports={name: port for name, port in (tls_ports or {}).items() if port},
        )
        started = time.monotonic()
        kafka.start(timeout=timeout)
        try:
            write_state(data_dir, STATE_FILE, _state(kafka))
        except BaseException:
            kafka.stop()  # a broker nobody can find again must not keep running
            raise
    say(
        f"Kafka {kafka.version} ready in {time.monotonic() - started:.1f} s "
        f"(pid {kafka.pid}, data {data_dir}, log {kafka.log_path})",
        file=sys.stderr,
    )
    for line in listener_lines(kafka):
        say(line, file=sys.stderr)
    if kafka.tls_dir:
        say(
            f"TLS files (CA, client key stores, their password): {kafka.tls_dir}",
            file=sys.stderr,
        )
    say(kafka.bootstrap_servers)
    return 0


def port_taken(port: int, origin: str) -> str:
    """Why a broker cannot start on ``port`` (from ``origin``), and what to do."""
    elsewhere = (
        "start this one on another port: `kedro streams broker start --port "
        "<port>` (--port 0: a free one), then set kafka.bootstrap_servers in "
        "conf/<env>/globals.yml to the address it prints"
    )
    try:
        probe(f"{HOST}:{port}", timeout=2.0)
    except KafkaError:
        return f"port {port} ({origin}) is taken by another program: stop it, or {elsewhere}"
    return (
        f"port {port} ({origin}) is taken by a Kafka broker that this command "
        "did not start (Docker's, or another project's): use that broker as it "
        f"is (nothing to start), or {elsewhere}"
    )


def _state(kafka: LocalKafka) -> dict:
    """What the state file records of a started broker."""
    return {
        "pid": kafka.pid,
        "kafka_version": kafka.version,
        "bootstrap_servers": kafka.bootstrap_servers,
        "sasl_bootstrap_servers": kafka.sasl_bootstrap_servers,
        "tls_bootstrap_servers": kafka.tls_bootstrap_servers,
        "tls_dir": str(kafka.tls_dir) if kafka.tls_dir else None,
        "controller_port": kafka.listeners.controller_port,
        "data_dir": str(kafka.data_dir),
        "log_path": str(kafka.log_path),
        "properties_path": str(kafka.properties_path),
        "cluster_id": kafka.cluster_id,
    }


def listener_lines(kafka: LocalKafka) -> list[str]:
    """A line per listener: its address and what a client of it sets."""
    logins = "PLAIN and SCRAM-SHA-512 logins"
    lines = [f"PLAINTEXT listener: {kafka.bootstrap_servers} (no TLS, no login)"]
    if kafka.sasl_bootstrap_servers:
        lines.append(
            f"SASL_PLAINTEXT listener: {kafka.sasl_bootstrap_servers} "
            f"(security_protocol SASL_PLAINTEXT: {logins})"
        )
    serves = {
        "SSL": "security_protocol SSL: the broker's certificate",
        "MTLS": "security_protocol SSL, with a client certificate",
        "SASL_SSL": f"security_protocol SASL_SSL: {logins}",
    }
    for name, servers in kafka.tls_bootstrap_servers.items():
        lines.append(f"{name} listener: {servers} ({serves.get(name, 'SSL')})")
    return lines


def stop(data_dir: Path, grace: float = 20.0) -> int:
    """Stops the broker recorded in ``data_dir``; the data stays."""
    with _locked(data_dir):
        state = read_state(data_dir, STATE_FILE)
        if state and _state_is_ours(state):
            terminate(state["pid"], grace)
            say(f"Stopped Kafka (pid {state['pid']}); data kept in {data_dir}.")
        else:
            say("Kafka was not running.")
        (data_dir / STATE_FILE).unlink(missing_ok=True)
    return 0


def status(data_dir: Path) -> int:
    """Prints the broker's state as JSON; 0 if it runs and answers, else 3."""
    state = read_state(data_dir, STATE_FILE)
    if state is None:
        say(json.dumps({"running": False}))
        return 3
    running, reachable = _state_is_ours(state), False
    if running:
        with contextlib.suppress(KafkaError, OSError):
            reachable = bool(probe(state["bootstrap_servers"]))
    say(json.dumps({**state, "running": running, "reachable": reachable}, indent=2))
    return 0 if running and reachable else 3


def reset(data_dir: Path) -> int:
    """Stops the broker if it runs, and deletes its data folder."""
    if not data_dir.exists():
        say(f"No broker data in {data_dir}.")
        return 0
    # Only a folder this module made: never a path typed by mistake.
    if not (data_dir / "kraft-logs").is_dir() and any(
        not path.name.startswith(STATE_FILE) for path in data_dir.iterdir()
    ):
        raise BrokerError(f"{data_dir} does not look like a broker data folder")
    stop(data_dir)
    shutil.rmtree(data_dir)
    say(f"Deleted {data_dir}.")
    return 0
