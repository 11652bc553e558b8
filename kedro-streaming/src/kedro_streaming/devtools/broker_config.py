"""The files a broker runs from: ``server.properties`` (its listeners), JAAS
logins, its logging, and its storage, formatted once per data folder."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kedro_streaming._connectors.kafka.security import jaas_quote
from kedro_streaming.devtools.broker_jars import BrokerError
from kedro_streaming.devtools.processes import (
    HOST,
    free_ports,
    port_is_free,
    write_private,
)

NODE_ID = 1

_USERNAME_RE = re.compile(r"^[A-Za-z0-9_.$-]+$")
_PRINTABLE = range(0x20, 0x7F)
_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r"}

LOG4J2_PROPERTIES = """\
# Everything goes to stdout, which tools/broker.py redirects to broker.log.
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
# Per-request and state-change logs are very chatty at INFO/TRACE.
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = WARN
# Full config dumps (~1500 lines per start) would bury startup errors in
# log_tail(); the effective settings are in server.properties next to the log.
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
"""


@dataclass
class Listeners:
    """The broker's ports; the TLS listeners' by name."""

    port: int
    controller_port: int
    sasl_port: int | None = None
    tls_ports: dict[str, int] = field(default_factory=dict)


def choose_ports(
    port: int | None,
    sasl_port: int | None,
    tls_ports: Mapping[str, int],
    tls_names: list[str],
    *,
    sasl: bool,
) -> Listeners:
    """The requested ports, checked free, and free ones for the others."""
    wanted = [p for p in (port, sasl_port) if p is not None]
    requested = [*wanted, *filter(None, tls_ports.values())]
    twice = sorted({p for p in requested if requested.count(p) > 1})
    if twice:  # Kafka would fail with a stack about two listeners on one port
        raise BrokerError(
            f"port {twice[0]} is asked for two listeners: give each its own"
        )
    for wanted_port in wanted:
        if not port_is_free(wanted_port):
            raise BrokerError(_taken(wanted_port))
    # Spares, in case one equals a requested port.
    free = iter(free_ports(5 + len(tls_names) + len(requested)))
    used = set(requested)

    def pick() -> int:
        chosen = next(free)
        while chosen in used:
            chosen = next(free)
        used.add(chosen)
        return chosen

    listeners = Listeners(port or pick(), pick(), sasl_port)
    if sasl:
        listeners.sasl_port = sasl_port or pick()
    for name in tls_names:
        asked = tls_ports.get(name)
        if asked and not port_is_free(asked):
            raise BrokerError(_taken(asked, name))
        listeners.tls_ports[name] = asked or pick()
    return listeners


def _taken(port: int, listener: str | None = None) -> str:
    option = "--tls-ports" if listener else "--port or --sasl-port"
    return (
        f"port {port} on {HOST}"
        + (f" (the {listener} listener's)" if listener else "")
        + f" is already in use (another Kafka?): give another with {option} "
        "(0: a free one)"
    )


def server_properties(
    listeners: Listeners,
    *,
    log_dirs: Path,
    sasl_users: Mapping[str, str] | None,
    tls_dir: Path | None,
    extra_tls_listeners: Mapping[str, Path],
    extra: Mapping[str, object],
) -> dict[str, object]:
    """``server.properties`` of a single node, broker and controller (KRaft)."""
    props: dict[str, object] = {
        "process.roles": "broker,controller",
        "node.id": NODE_ID,
        # Static voter set: the simplest quorum for a fixed single node,
        # and it needs no "--standalone" formatting.
        "controller.quorum.voters": f"{NODE_ID}@{HOST}:{listeners.controller_port}",
        "controller.listener.names": "CONTROLLER",
        **_listener_properties(listeners, sasl=bool(sasl_users)),
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dirs),
        # Single node: every internal topic must get by with one replica.
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 1,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        "default.replication.factor": 1,
        "min.insync.replicas": 1,
        "num.partitions": 1,
        "auto.create.topics.enable": "true",
        # Consumer groups in tests/notebooks should not wait 3 s to rebalance.
        "group.initial.rebalance.delay.ms": 0,
        # Modest thread counts for laptops / 2-core CI machines.
        "num.network.threads": 2,
        "num.io.threads": 2,
        "background.threads": 2,
        "num.recovery.threads.per.data.dir": 1,
    }
    if sasl_users:
        props.update(_sasl_properties(sasl_users, "SASL_SSL" in listeners.tls_ports))
    if tls_dir is not None:
        props.update(_tls_properties(listeners, tls_dir, extra_tls_listeners))
    props.update(extra)
    return props


def _listener_properties(listeners: Listeners, *, sasl: bool) -> dict[str, str]:
    bound = [f"PLAINTEXT://{HOST}:{listeners.port}"]
    advertised = [f"PLAINTEXT://{HOST}:{listeners.port}"]
    protocol_map = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
    if sasl:
        bound.append(f"SASL_PLAINTEXT://{HOST}:{listeners.sasl_port}")
        advertised.append(f"SASL_PLAINTEXT://{HOST}:{listeners.sasl_port}")
        protocol_map.append("SASL_PLAINTEXT:SASL_PLAINTEXT")
    for name, port in listeners.tls_ports.items():
        bound.append(f"{name}://{HOST}:{port}")
        # Advertised by the name its certificate holds, which clients verify.
        advertised.append(f"{name}://localhost:{port}")
        protocol_map.append(f"{name}:{'SASL_SSL' if name == 'SASL_SSL' else 'SSL'}")
    bound.append(f"CONTROLLER://{HOST}:{listeners.controller_port}")
    return {
        "listeners": ",".join(bound),
        "advertised.listeners": ",".join(advertised),
        "listener.security.protocol.map": ",".join(protocol_map),
    }


def _sasl_properties(users: Mapping[str, str], with_ssl: bool) -> dict[str, str]:
    props = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512"}
    for listener in ["sasl_plaintext"] + (["sasl_ssl"] if with_ssl else []):
        prefix = f"listener.name.{listener}"
        props[f"{prefix}.sasl.enabled.mechanisms"] = "PLAIN,SCRAM-SHA-512"
        # Listener-scoped JAAS: no global -Djava.security.auth.login.config.
        props[f"{prefix}.plain.sasl.jaas.config"] = jaas_plain_config(users)
        # SCRAM's users live in the cluster's metadata (made at start).
        props[f"{prefix}.scram-sha-512.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        )
    return props


def _tls_properties(
    listeners: Listeners, tls_dir: Path, extra_tls_listeners: Mapping[str, Path]
) -> dict[str, str]:
    props = {}
    for name in listeners.tls_ports:
        prefix = f"listener.name.{name.lower()}"
        keystore = extra_tls_listeners.get(name, tls_dir / "broker.pem")
        props[f"{prefix}.ssl.keystore.type"] = "PEM"
        props[f"{prefix}.ssl.keystore.location"] = str(keystore)
        props[f"{prefix}.ssl.truststore.type"] = "PEM"
        props[f"{prefix}.ssl.truststore.location"] = str(tls_dir / "ca.pem")
        if name == "MTLS":
            props[f"{prefix}.ssl.client.auth"] = "required"
    return props


def write_config(data_dir: Path, version: str, props: Mapping[str, object]) -> Path:
    """Writes ``server.properties`` and the logging's file; returns the former."""
    path = data_dir / "server.properties"
    lines = [f"# Generated by tools/broker.py for Kafka {version}"]
    lines += [f"{key}={escape_property(str(value))}" for key, value in props.items()]
    write_private(path, ("\n".join(lines) + "\n").encode("ascii"))  # passwords
    (data_dir / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
    return path


def format_storage_once(
    data_dir: Path, storage_tool: list[str], log_path: Path, deadline: float
) -> str:
    """The cluster id of the storage in ``data_dir``, formatted first if new
    (with ``storage_tool``: Kafka's StorageTool, up to its arguments)."""
    meta = data_dir / "kraft-logs" / "meta.properties"
    if meta.is_file():
        return re.search(r"^cluster\.id=(.+)$", meta.read_text(), re.MULTILINE)[1]
    cluster_id = new_cluster_id()
    command = [*storage_tool, "format", "-t", cluster_id, "-c"]
    command.append(str(data_dir / "server.properties"))
    try:
        out = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=max(1.0, deadline - time.monotonic()),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BrokerError("Kafka storage format timed out") from exc
    with open(log_path, "a") as log:
        log.write(out.stdout)
    if out.returncode != 0:
        raise BrokerError(
            f"Kafka storage format failed (exit {out.returncode}):\n{out.stdout[-4000:]}"
        )
    return cluster_id


def new_cluster_id() -> str:
    """A Kafka Uuid string; as Kafka's, none starting with '-' (a flag to the
    storage tool)."""
    while True:
        raw = os.urandom(16)
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if not text.startswith("-") and any(raw):
            return text


def escape_property(value: str) -> str:
    """Escapes a value for java.util.Properties (read as ISO-8859-1)."""
    return "".join(
        _ESCAPES.get(ch) or (ch if ord(ch) in _PRINTABLE else f"\\u{ord(ch):04x}")
        for ch in value
    )


def jaas_plain_config(users: Mapping[str, str]) -> str:
    """Builds the server-side PlainLoginModule config holding ``users``."""
    options = []
    for user, password in users.items():
        # A name becomes part of an option's name (user_<name>): no quoting there.
        if not _USERNAME_RE.match(user):
            raise ValueError(
                f"SASL username {user!r} must match {_USERNAME_RE.pattern}"
            )
        options.append(f"user_{user}={jaas_quote(password)}")
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(options)
        + ";"
    )


def write_jaas_file(path: Path, users: Mapping[str, str]) -> Path:
    """A broker's JAAS file: PLAIN logins of ``users`` and SCRAM-SHA-512 (how
    Kafka's Docker image takes SASL settings)."""
    text = (
        "KafkaServer {\n"
        f"  {jaas_plain_config(users)}\n"
        "  org.apache.kafka.common.security.scram.ScramLoginModule required;\n"
        "};\n"
    )
    write_private(path, text.encode())  # it holds the passwords
    return path
