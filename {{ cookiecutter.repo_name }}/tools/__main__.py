"""The example's taxi trips, from the project root.

    python -m tools trips init|land [--env local]
    python -m tools trips send|watch [--env kafka]

Each command reads what it needs (the input folders, the broker address,
topics and credentials) from ``conf/<env>``, as ``kedro run --env <env>``
does. The development services (a Kafka broker, a Spark cluster) are the
plugin's: ``kedro streams broker start``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from kafka.errors import KafkaError
from kedro_streaming import SchemaRegistry, avro_framer
from kedro_streaming.devtools import kafka
from kedro_streaming.devtools.config import input_root, kafka_conf, project_config
from kedro_streaming.devtools.feed import write_feed

from tools import trips


def run_trips(args: argparse.Namespace) -> int:
    if args.command in ("init", "land"):
        root = input_root(args.env)
        landing_dir = args.landing_dir or root / trips.LANDING_FOLDER
    if args.command == "init":
        zones = root / trips.ZONES_FILE_NAME
        trips.init(landing_dir, zones, files=args.files, write_feed=write_feed)
        sys.stdout.write(
            f"Wrote {zones}, its changes to {root / trips.ZONE_CHANGES_FOLDER} "
            f"and {args.files} files to {landing_dir}\n"
        )
        return 0
    if args.command == "land" and args.rule_breakers:
        sys.stdout.write(f"{trips.write_rule_breakers(landing_dir)}\n")
        return 0
    if args.command == "land":
        for path in trips.land(landing_dir, args.files, args.interval):
            sys.stdout.write(f"{path}\n")
            sys.stdout.flush()
        return 0
    settings, credentials = kafka_conf(args.env)
    servers, security = (
        settings["bootstrap_servers"],
        kafka.client_security(credentials, settings["bootstrap_servers"]),
    )
    if args.command == "watch":
        topic = args.topic or settings["summary_topic"]
        seen = kafka.watch(servers, topic, args.idle_seconds, **security)
        sys.stderr.write(f"{seen} messages on {topic}\n")
        return 0
    topic, started = args.topic or settings["trips_topic"], time.monotonic()
    if args.rule_breakers:
        messages = (json.dumps(trip) for trip in trips.rule_breaking_trips())
    elif args.source:
        messages = trips.file_messages(args.source)
    else:
        messages = trips.bundled_messages(args.files)
    value, unfit = None, []
    if args.format == "avro":
        value, messages = avro_values(args, settings, topic, messages, unfit)
    sent = kafka.send(
        messages,
        servers,
        topic,
        key=trips.message_key,
        value=value,
        rate=args.rate,
        count=args.count,
        partitions=args.partitions,
        **security,
    )
    sys.stdout.write(
        f"Sent {sent} messages to {topic} at {servers} "
        f"in {time.monotonic() - started:.1f} s\n"
    )
    for reason in unfit:
        sys.stderr.write(f"Not sent: {reason}\n")
    return 0


def avro_values(args, settings, topic, messages, unfit):
    """Avro framing of the trips, and the trips that fit the schema: a record
    that does not (a field of another type, a line that is not JSON) cannot
    be written in Avro; it is not sent, and ``unfit`` says why."""
    address = settings.get("schema_registry_url")
    if not address:
        raise ValueError(
            f"conf/{args.env}/globals.yml sets no kafka.schema_registry_url for "
            "--format avro (`kedro streams registry start` runs a registry)"
        )
    login = project_config(args.env)["credentials"].get("schema_registry") or {}
    registry = SchemaRegistry(address, login.get("username"), login.get("password"))
    frame = avro_framer(
        registry, f"{topic}-value", trips.trip_avro_schema(args.schema_version)
    )
    records = {}

    def fitting():
        for number, line in enumerate(messages, 1):
            try:
                records[line] = trips.avro_trip(line, args.schema_version)
            except ValueError as error:
                unfit.append(f"trip {number} ({error}): {line[:80]}")
                continue
            yield line

    return (lambda line: frame(records.pop(line))), fitting()


def parser() -> argparse.ArgumentParser:
    """The command line: ``trips <command> [options]``."""
    main = argparse.ArgumentParser(
        prog="python -m tools", description=__doc__.split("\n\n")[0]
    )
    tools = main.add_subparsers(dest="tool", required=True)
    example = tools.add_parser("trips", help="the example's taxi trips")
    commands = example.add_subparsers(dest="command", required=True)
    init = commands.add_parser(
        "init", help="write the zone lookup, its changes and 8 trip files"
    )
    init.add_argument("--files", type=int, default=8)
    land = commands.add_parser("land", help="drop more trip files, one at a time")
    land.add_argument("--files", type=int, default=6, help="how many (default 6)")
    land.add_argument(
        "--interval", type=float, default=10.0, help="seconds between files"
    )
    for command in (init, land):
        command.add_argument(
            "--landing-dir", type=Path, help="default: input_root's trips_landing"
        )
        command.add_argument(
            "--env", default="local", help="conf/<env> to take input_root from"
        )

    send = commands.add_parser("send", help="send the trips to Kafka")
    send.add_argument("--topic", help="default: kafka.trips_topic")
    send.add_argument(
        "--source", type=Path, help="a TLC .csv or .parquet file (default: the example)"
    )
    send.add_argument("--files", type=int, default=8, help="example files to send")
    for command in (land, send):
        command.add_argument(
            "--rule-breakers",
            action="store_true",
            help="trips that break each shipped expectation, instead",
        )
    send.add_argument(
        "--format",
        choices=("json", "avro"),
        default="json",
        help="avro: Avro in Confluent's wire format, its schema registered at "
        "kafka.schema_registry_url",
    )
    send.add_argument(
        "--schema-version",
        type=int,
        choices=trips.AVRO_VERSIONS,
        default=1,
        help="with --format avro: the trip schema's version (2 adds a field)",
    )
    send.add_argument("--rate", type=float, default=0.0, help="messages per second")
    send.add_argument("--count", type=int, help="send at most this many messages")
    send.add_argument(
        "--partitions",
        type=int,
        default=2,
        help="partitions of a new topic (at most the cores Spark has, for Real-Time Mode)",
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
        return run_trips(args)
    except (KafkaError, ValueError) as error:
        sys.stderr.write(f"error: {error}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
