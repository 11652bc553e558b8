"""``send`` and ``watch``: any messages to and from a Kafka topic, with the
broker and credentials of ``conf/<env>``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from kedro_streaming import SchemaRegistry, StreamingConfigError, avro_reader
from kedro_streaming._project import project_config
from kedro_streaming.devtools import kafka
from kedro_streaming.devtools.cli_base import ServiceCommand
from kedro_streaming.devtools.processes import say


def topic_options(command):
    """``--topic``, ``--bootstrap-servers`` and ``--env``."""
    for option in reversed(
        (
            click.option("--topic", required=True),
            click.option(
                "--bootstrap-servers", help="default: kafka.bootstrap_servers of --env"
            ),
            click.option(
                "--env",
                default="local",
                help="conf/<env> for the broker and credentials",
            ),
        )
    ):
        command = option(command)
    return command


@click.command(cls=ServiceCommand)
@click.argument(
    "file",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path),
)
@click.option("--key", help="key each message by this field of its JSON")
@click.option("--rate", type=float, default=0.0, help="messages per second")
@click.option("--partitions", type=int, default=2, help="partitions of a new topic")
@click.option(
    "--max-message-bytes",
    type=int,
    metavar="N",
    help="the largest message sent (the producer's max.request.size, "
    f"default {kafka.MAX_REQUEST_SIZE}), and of a new topic "
    "(its max.message.bytes)",
)
@topic_options
def send(
    *,  # click passes the options by name
    file: Path,
    key: str | None,
    rate: float,
    partitions: int,
    max_message_bytes: int | None,
    topic: str,
    bootstrap_servers: str | None,
    env: str,
) -> int:
    """Send JSON lines (a file, or - for stdin), one message per line.

    Names each line not sent (by its line number), and exits 1 if any was not.
    """
    servers, security = _kafka_client(env, bootstrap_servers)
    lines = sys.stdin if str(file) == "-" else file.open(encoding="utf-8")
    started = time.monotonic()
    with lines:
        messages = (
            (number, line.rstrip("\r\n"))
            for number, line in enumerate(lines, 1)
            if line.strip()
        )
        delivery = kafka.deliver(
            messages,
            servers,
            topic,
            rate=rate,
            partitions=partitions,
            key=kafka.json_field(key) if key else None,
            max_message_bytes=max_message_bytes,
            **security,
        )
    for number, reason in delivery.failed:
        say(f"line {number}: not sent: {reason}", file=sys.stderr)
    if delivery.stopped is not None:
        say(
            f"Sending stopped at line {delivery.stopped}: the lines after it were "
            "not sent",
            file=sys.stderr,
        )
    say(
        f"Sent {delivery.acknowledged} messages to {topic} at {servers} "
        f"in {time.monotonic() - started:.1f} s, {len(delivery.failed)} not sent"
    )
    return 1 if delivery.failed else 0


@click.command(cls=ServiceCommand)
@click.option(
    "--idle-seconds", type=float, default=0.0, help="stop after this long idle"
)
@click.option(
    "--avro/--no-avro",
    default=None,
    help="decode Avro in Confluent's wire format through "
    "kafka.schema_registry_url, one JSON line per message (default: when "
    "the registry has the subject <topic>-value)",
)
@topic_options
def watch(
    idle_seconds: float,
    avro: bool | None,
    topic: str,
    bootstrap_servers: str | None,
    env: str,
) -> int:
    """Print a topic's messages (key<TAB>value, or Avro as JSON), from the start.

    Avro is decoded with ``--avro``, or when the env's registry has the
    topic's ``<topic>-value`` subject.
    """
    config = project_config(env)
    servers, security = _kafka_client(env, bootstrap_servers, config)
    read = _avro_reader(avro, topic, env, config)
    if read is None:
        seen = kafka.watch(servers, topic, idle_seconds, **security)
        say(f"{seen} messages on {topic}", file=sys.stderr)
        return 0
    seen, undecoded = kafka.watch_avro(servers, topic, idle_seconds, read, **security)
    say(
        f"{seen + undecoded} messages on {topic}, {undecoded} not decoded",
        file=sys.stderr,
    )
    return 1 if undecoded else 0


def _avro_reader(avro: bool | None, topic: str, env: str, config: dict):
    """A decoder of Avro frames through ``kafka.schema_registry_url`` of
    ``conf/<env>`` (its login: the ``schema_registry`` credentials entry, as
    the catalog's ``avro`` options name it), or None to print text."""
    if avro is False:
        return None
    address = (config["globals"].get("kafka") or {}).get("schema_registry_url")
    if not address:
        if avro:
            raise ValueError(
                f"--avro: conf/{env}/globals.yml sets no "
                "kafka.schema_registry_url, the registry to decode with"
            )
        return None
    login = config["credentials"].get("schema_registry") or {}
    try:
        registry = SchemaRegistry(address, login.get("username"), login.get("password"))
        if avro is None and f"{topic}-value" not in registry.subjects():
            return None
    except StreamingConfigError as error:
        if avro:
            raise ValueError(str(error)) from None
        say(f"Printing the values as text: {error}", file=sys.stderr)
        return None
    if avro is None:
        say(
            f"Decoding Avro through {registry.url} (it has subject "
            f"{topic}-value; --no-avro prints the bytes as text)",
            file=sys.stderr,
        )
    return avro_reader(registry)


def _kafka_client(
    env: str, bootstrap_servers: str | None, config: dict | None = None
) -> tuple[str, dict[str, str]]:
    """The broker list (``--bootstrap-servers``, else ``kafka.bootstrap_servers``
    of ``conf/<env>/globals.yml``) and the ``kafka`` entry of its credentials."""
    config = config or project_config(env)
    servers = bootstrap_servers or (config["globals"].get("kafka") or {}).get(
        "bootstrap_servers"
    )
    if not servers:
        raise ValueError(
            f"no broker: give --bootstrap-servers, or set kafka.bootstrap_servers "
            f"in conf/{env}/globals.yml"
        )
    return servers, kafka.client_security(config["credentials"].get("kafka"), servers)
