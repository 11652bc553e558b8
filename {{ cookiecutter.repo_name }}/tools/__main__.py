"""The project's development tools, run from the project root.

    python -m tools broker start|stop|status|reset
    python -m tools trips init|land
    python -m tools trips send|watch [--env kafka]

Kafka commands read the broker address, the topics and the credentials from
``conf/<env>`` (default ``kafka``), as ``kedro run --env <env>`` does.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from kafka.errors import KafkaError
from kedro.config import MissingConfigException, OmegaConfigLoader

from tools import broker, trips


def kafka_conf(env: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``kafka`` globals and the ``kafka`` credentials of ``conf/<env>``."""
    with warnings.catch_warnings():
        # Kedro registers its resolvers with an API newer omegaconf deprecates.
        warnings.simplefilter("ignore", UserWarning)
        loader = OmegaConfigLoader(
            conf_source="conf", env=env, base_env="base", default_run_env="local"
        )
        entries = []
        for key in ("globals", "credentials"):
            try:
                entries.append(loader[key].get("kafka") or {})
            except MissingConfigException:  # e.g. an environment without secrets
                entries.append({})
    settings, credentials = entries
    if not settings.get("bootstrap_servers"):
        raise ValueError(f"conf/{env}/globals.yml sets no kafka.bootstrap_servers")
    return settings, credentials


def run_broker(args: argparse.Namespace) -> int:
    if args.command == "stop":
        return broker.stop(args.data_dir, args.grace)
    if args.command == "status":
        return broker.status(args.data_dir)
    if args.command == "reset":
        return broker.reset(args.data_dir)
    port = args.port
    if port is None:
        servers = kafka_conf(args.env)[0]["bootstrap_servers"]
        port = int(servers.split(",")[0].rpartition(":")[2])
    users = {}
    for spec in args.sasl_user or []:
        user, colon, password = spec.partition(":")
        if not colon:
            raise ValueError(f"--sasl-user takes USER:PASSWORD, not {user!r}")
        users[user] = password
    return broker.start(
        args.data_dir,
        port,
        sasl_users=users,
        sasl_port=args.sasl_port,
        heap=args.heap,
        timeout=args.timeout,
    )


def run_trips(args: argparse.Namespace) -> int:
    if args.command == "init":
        trips.init(args.landing_dir, files=args.files)
        sys.stdout.write(
            f"Wrote {trips.ZONES_FILE} and {args.files} files to {args.landing_dir}\n"
        )
        return 0
    if args.command == "land":
        for path in trips.land(args.landing_dir, args.files, args.interval):
            sys.stdout.write(f"{path}\n")
            sys.stdout.flush()
        return 0
    settings, credentials = kafka_conf(args.env)
    servers, security = (
        settings["bootstrap_servers"],
        trips.client_security(credentials),
    )
    if args.command == "watch":
        topic = args.topic or settings["summary_topic"]
        seen = trips.watch(servers, topic, args.idle_seconds, **security)
        sys.stderr.write(f"{seen} messages on {topic}\n")
        return 0
    topic, started = args.topic or settings["trips_topic"], time.monotonic()
    messages = (
        trips.file_messages(args.source)
        if args.source
        else trips.bundled_messages(args.files)
    )
    sent = trips.send(
        messages,
        servers,
        topic,
        rate=args.rate,
        count=args.count,
        partitions=args.partitions,
        **security,
    )
    sys.stdout.write(
        f"Sent {sent} messages to {topic} at {servers} "
        f"in {time.monotonic() - started:.1f} s\n"
    )
    return 0


def parser() -> argparse.ArgumentParser:
    """The command line: ``<tool> <command> [options]``."""
    main = argparse.ArgumentParser(
        prog="python -m tools", description=__doc__.split("\n\n")[0]
    )
    tools = main.add_subparsers(dest="tool", required=True)

    kafka = tools.add_parser("broker", help="a local Kafka broker, without Docker")
    kafka.set_defaults(run=run_broker)
    commands = kafka.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="start it, detached; wait until ready")
    start.add_argument(
        "--port", type=int, help="default: that of kafka.bootstrap_servers; 0: any"
    )
    start.add_argument(
        "--sasl-user",
        action="append",
        metavar="USER:PASSWORD",
        help="add a SASL_PLAINTEXT/PLAIN listener with this user (repeatable)",
    )
    start.add_argument("--sasl-port", type=int)
    start.add_argument("--heap", default="512m", help="JVM heap (default 512m)")
    start.add_argument("--timeout", type=float, default=90, help="seconds to start")
    stop = commands.add_parser("stop", help="stop it; the data stays")
    stop.add_argument("--grace", type=float, default=20.0, help="seconds to SIGKILL")
    status = commands.add_parser("status", help="its state (exit 3 unless it runs)")
    reset = commands.add_parser("reset", help="stop it and delete its data")
    for command in (start, stop, status, reset):
        command.add_argument("--data-dir", type=Path, default=broker.DATA_DIR)
    start.add_argument("--env", default="kafka", help="conf/<env> (default kafka)")

    example = tools.add_parser("trips", help="the example's taxi trips")
    example.set_defaults(run=run_trips)
    commands = example.add_subparsers(dest="command", required=True)
    init = commands.add_parser("init", help="write the zone lookup and 8 trip files")
    init.add_argument("--files", type=int, default=8)
    land = commands.add_parser("land", help="drop more trip files, one at a time")
    land.add_argument("--files", type=int, default=6, help="how many (default 6)")
    land.add_argument(
        "--interval", type=float, default=10.0, help="seconds between files"
    )
    for command in (init, land):
        command.add_argument("--landing-dir", type=Path, default=trips.LANDING_DIR)

    send = commands.add_parser("send", help="send the trips to Kafka")
    send.add_argument("--topic", help="default: kafka.trips_topic")
    send.add_argument(
        "--source", type=Path, help="a TLC .csv or .parquet file (default: the example)"
    )
    send.add_argument("--files", type=int, default=8, help="example files to send")
    send.add_argument("--rate", type=float, default=0.0, help="messages per second")
    send.add_argument("--count", type=int, help="send at most this many messages")
    send.add_argument(
        "--partitions", type=int, default=3, help="partitions of a new topic"
    )
    watch = commands.add_parser("watch", help="print a topic's messages")
    watch.add_argument("--topic", help="default: kafka.summary_topic")
    watch.add_argument(
        "--idle-seconds", type=float, default=0.0, help="stop after this long idle"
    )
    for command in (send, watch):
        command.add_argument(
            "--env", default="kafka", help="conf/<env> (default kafka)"
        )
    return main


def main(argv: list[str] | None = None) -> int:
    """Runs one command; returns its exit code."""
    # kafka-python warns on every refused connection while a broker starts.
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except (broker.BrokerError, KafkaError, ValueError) as error:
        sys.stderr.write(f"error: {error}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
