"""``broker start|stop|status|reset|tls-files|add-users``: a local Kafka broker."""

from __future__ import annotations

import getpass
import os
import sys
from pathlib import Path

import click

from kedro_streaming.devtools import broker
from kedro_streaming.devtools.certificates import ensure_tls_files
from kedro_streaming.devtools.cli_base import (
    ServiceGroup,
    data_dir_option,
    grace_option,
)
from kedro_streaming.devtools.config import kafka_conf
from kedro_streaming.devtools.processes import port_is_free, say

with_data_dir = data_dir_option(broker.DATA_DIR)


def sasl_user_option(help_text: str, *, required: bool = False):
    return click.option(
        "--sasl-user",
        "sasl_user",
        multiple=True,
        required=required,
        metavar="USER",
        help=help_text,
    )


@click.group("broker", cls=ServiceGroup)
def broker_group() -> None:
    """A local Kafka broker, without Docker."""


@broker_group.command()
@click.option(
    "--port",
    type=int,
    help="the PLAINTEXT listener's (default: that of kafka.bootstrap_servers, "
    "unless a TLS or SASL listener has it; 0: any)",
)
@sasl_user_option(
    "add a SASL_PLAINTEXT listener (and SASL_SSL with --tls) with this "
    "user, for PLAIN and SCRAM-SHA-512 (repeatable); the password is "
    "$KAFKA_SASL_PASSWORD, or asked for on a terminal"
)
@click.option("--sasl-port", type=int, help="the SASL_PLAINTEXT listener's")
@click.option(
    "--tls",
    is_flag=True,
    help="add TLS listeners (SSL, mutual TLS, SASL_SSL with PLAIN and "
    "SCRAM-SHA-512) with a private CA kept in --data-dir/tls",
)
@click.option(
    "--tls-ports",
    type=int,
    nargs=3,
    default=(9093, 9094, 9095),
    metavar="SSL MTLS SASL_SSL",
    help="their ports (default 9093 9094 9095)",
)
@click.option("--heap", default="512m", help="JVM heap (default 512m)")
@click.option("--timeout", type=float, default=90, help="seconds to start")
@with_data_dir
@click.option("--env", default="kafka", help="conf/<env> (default kafka)")
def start(
    *,  # click passes the options by name
    port: int | None,
    sasl_user: tuple[str, ...],
    sasl_port: int | None,
    tls: bool,
    tls_ports: tuple[int, int, int],
    heap: str,
    timeout: float,
    data_dir: Path,
    env: str,
) -> int:
    """Start it, detached; wait until ready."""
    users = _sasl_users(sasl_user)
    listeners = dict(zip(("SSL", "MTLS", "SASL_SSL"), tls_ports)) if tls else None
    # The broker's other listeners, by port: the plain one must not take theirs.
    others = {port: name for name, port in (listeners or {}).items() if port}
    if users and sasl_port:
        others[sasl_port] = "SASL_PLAINTEXT"
    origin = "--port"
    if port is None:
        port, origin = _plain_port(env, others)
    elif port in others:
        raise ValueError(
            f"--port {port} is the {others[port]} listener's too: give another "
            "(0: any free one)"
        )
    return broker.start(
        data_dir,
        port,
        sasl_users=users,
        sasl_port=sasl_port,
        heap=heap,
        timeout=timeout,
        tls_ports=listeners,
        port_origin=origin,
    )


@broker_group.command()
@grace_option
@with_data_dir
def stop(grace: float, data_dir: Path) -> int:
    """Stop it; the data stays."""
    return broker.stop(data_dir, grace)


@broker_group.command()
@with_data_dir
def status(data_dir: Path) -> int:
    """Its state (exit 3 unless it runs)."""
    return broker.status(data_dir)


@broker_group.command()
@with_data_dir
def reset(data_dir: Path) -> int:
    """Stop it and delete its data."""
    return broker.reset(data_dir)


@broker_group.command("tls-files")
@sasl_user_option(
    "a login (repeatable); its password $KAFKA_SASL_PASSWORD, or asked for "
    "on a terminal"
)
@with_data_dir
def tls_files(sasl_user: tuple[str, ...], data_dir: Path) -> int:
    """Make the CA and stores (and, with --sasl-user, a JAAS file) that
    docker-compose.tls.yml mounts."""
    folder = ensure_tls_files(data_dir / "tls")
    say(f"TLS files (CA, key stores, their password): {folder}")
    users = _sasl_users(sasl_user)
    if users:
        jaas = broker.write_jaas_file(folder / "broker-jaas.conf", users)
        say(f"PLAIN logins of {', '.join(users)}: {jaas}")
    return 0


@broker_group.command("add-users")
@click.option(
    "--bootstrap-servers",
    help="its PLAINTEXT listener (default: the one `broker start` runs, "
    "else localhost:9092, the compose broker's)",
)
@sasl_user_option(
    "a login (repeatable); its password $KAFKA_SASL_PASSWORD, or asked for "
    "on a terminal",
    required=True,
)
@with_data_dir
def add_users(
    bootstrap_servers: str | None, sasl_user: tuple[str, ...], data_dir: Path
) -> int:
    """Add SCRAM-SHA-512 logins to a running broker."""
    servers = bootstrap_servers or broker.running_plain_listener(data_dir)
    broker.create_scram_users(servers, _sasl_users(sasl_user))
    say(f"SCRAM-SHA-512 logins of {', '.join(sasl_user)} on {servers}")
    return 0


def _plain_port(env: str, others: dict[int, str]) -> tuple[int, str]:
    """The PLAINTEXT listener's port, and where it was read: that of
    ``kafka.bootstrap_servers`` unless one of ``others`` (the broker's other
    listeners) has it, as when the project talks to the SASL_SSL one; then
    Kafka's usual 9092, or any free port (0) if that is taken."""
    try:
        servers = kafka_conf(env)[0]["bootstrap_servers"]
        origin = f"kafka.bootstrap_servers of conf/{env}/globals.yml: {servers}"
    except ValueError:  # conf/<env> not written yet: Kafka's usual port
        servers = "localhost:9092"
        origin = f"Kafka's usual port: conf/{env}/globals.yml sets none"
    port = int(servers.split(",")[0].rpartition(":")[2])
    if port not in others:
        return port, origin
    plain = 9092 if 9092 not in others and port_is_free(9092) else 0
    say(
        f"kafka.bootstrap_servers of conf/{env} ({servers}) is the {others[port]} "
        f"listener's: the PLAINTEXT listener takes {plain or 'a free port'}",
        file=sys.stderr,
    )
    return plain, "Kafka's usual port"


def _sasl_users(specs: tuple[str, ...]) -> dict[str, str]:
    """``{user: password}`` of ``--sasl-user USER`` options: the password the
    project's credentials read, $KAFKA_SASL_PASSWORD, else asked for on a
    terminal; never from the command line (where `ps` and the shell's history
    would show it)."""
    users = {}
    for spec in specs:
        user, colon, _ = spec.partition(":")
        if colon:
            raise ValueError(
                f"--sasl-user {user}:...: a password on the command line is "
                "shown to every user of this machine (ps) and kept in the "
                f"shell's history. Give --sasl-user {user} and export "
                "KAFKA_SASL_PASSWORD (or type it when asked, on a terminal)"
            )
        password = os.environ.get("KAFKA_SASL_PASSWORD")
        if not password and sys.stdin.isatty():
            password = getpass.getpass(
                f"Password of {user} (or $KAFKA_SASL_PASSWORD): "
            )
        if not password:
            raise ValueError(
                f"--sasl-user {user}: export KAFKA_SASL_PASSWORD, its password "
                "(on a terminal, the command asks for it)"
            )
        users[user] = password
    return users
