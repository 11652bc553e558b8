"""Development services of a streaming project, run from the project root.

    kedro streams broker start|stop|status|reset|tls-files|add-users
    kedro streams registry start|stop|status|reset
    kedro streams cluster start|stop|status
    kedro streams connect start|stop|status
    kedro streams submit [--env cluster] [-- <kedro run options>]
    kedro streams send --topic T [--key FIELD] FILE|-   # JSON lines to Kafka
    kedro streams watch --topic T                       # a topic's messages

(``python -m kedro_streaming.devtools ...`` is the same, without Kedro's CLI.)

Each command reads what it needs (the input folders, the broker address,
topics and credentials, Spark settings) from ``conf/<env>``, as
``kedro run --env <env>`` does.
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

from kafka.errors import KafkaError

from ..errors import StreamingConfigError
from ..schema_registry import SchemaRegistry, avro_reader
from . import broker, kafka, registry, spark
from .certificates import ensure_tls_files
from .config import kafka_conf, project_config
from .processes import ProcessError, port_is_free, say, stop_recorded


def run_send(args: argparse.Namespace) -> int:
    """Sends each line; names each one not sent (by its line number), and
    exits 1 if any was not."""
    servers, security = _kafka_client(args)
    lines = sys.stdin if str(args.file) == "-" else args.file.open(encoding="utf-8")
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
            args.topic,
            rate=args.rate,
            partitions=args.partitions,
            key=kafka.json_field(args.key) if args.key else None,
            max_message_bytes=args.max_message_bytes,
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
        f"Sent {delivery.acknowledged} messages to {args.topic} at {servers} "
        f"in {time.monotonic() - started:.1f} s, {len(delivery.failed)} not sent"
    )
    return 1 if delivery.failed else 0


def run_watch(args: argparse.Namespace) -> int:
    """Prints the topic's messages: as ``key<TAB>value`` text, or decoded
    from Avro as JSON lines (``--avro``, or a topic whose ``<topic>-value``
    subject the env's registry has)."""
    config = project_config(args.env)
    servers, security = _kafka_client(args, config)
    read = _avro_reader(args, config)
    if read is None:
        seen = kafka.watch(servers, args.topic, args.idle_seconds, **security)
        say(f"{seen} messages on {args.topic}", file=sys.stderr)
        return 0
    seen, undecoded = kafka.watch_avro(
        servers, args.topic, args.idle_seconds, read, **security
    )
    say(
        f"{seen + undecoded} messages on {args.topic}, {undecoded} not decoded",
        file=sys.stderr,
    )
    return 1 if undecoded else 0


def _avro_reader(args: argparse.Namespace, config: dict):
    """A decoder of Avro frames through ``kafka.schema_registry_url`` of
    ``conf/<env>`` (its login: the ``schema_registry`` credentials entry, as
    the catalog's ``avro`` options name it), or None to print text."""
    if args.avro is False:
        return None
    address = (config["globals"].get("kafka") or {}).get("schema_registry_url")
    if not address:
        if args.avro:
            raise ValueError(
                f"--avro: conf/{args.env}/globals.yml sets no "
                "kafka.schema_registry_url, the registry to decode with"
            )
        return None
    login = config["credentials"].get("schema_registry") or {}
    try:
        registry = SchemaRegistry(address, login.get("username"), login.get("password"))
        if args.avro is None and f"{args.topic}-value" not in registry.subjects():
            return None
    except StreamingConfigError as error:
        if args.avro:
            raise ValueError(str(error)) from None
        say(f"Printing the values as text: {error}", file=sys.stderr)
        return None
    if args.avro is None:
        say(
            f"Decoding Avro through {registry.url} (it has subject "
            f"{args.topic}-value; --no-avro prints the bytes as text)",
            file=sys.stderr,
        )
    return avro_reader(registry)


def _kafka_client(
    args: argparse.Namespace, config: dict | None = None
) -> tuple[str, dict[str, str]]:
    """The broker list (``--bootstrap-servers``, else ``kafka.bootstrap_servers``
    of ``conf/<env>/globals.yml``) and the ``kafka`` entry of its credentials."""
    config = config or project_config(args.env)
    servers = args.bootstrap_servers or (config["globals"].get("kafka") or {}).get(
        "bootstrap_servers"
    )
    if not servers:
        raise ValueError(
            f"no broker: give --bootstrap-servers, or set kafka.bootstrap_servers "
            f"in conf/{args.env}/globals.yml"
        )
    return servers, kafka.client_security(config["credentials"].get("kafka"), servers)


def run_broker(args: argparse.Namespace) -> int:
    if args.command == "stop":
        return broker.stop(args.data_dir, args.grace)
    if args.command == "status":
        return broker.status(args.data_dir)
    if args.command == "reset":
        return broker.reset(args.data_dir)
    if args.command == "tls-files":
        return write_tls_files(args)
    if args.command == "add-users":
        servers = args.bootstrap_servers or broker.running_plain_listener(args.data_dir)
        broker.create_scram_users(servers, _sasl_users(args.sasl_user))
        say(f"SCRAM-SHA-512 logins of {', '.join(args.sasl_user)} on {servers}")
        return 0
    users = _sasl_users(args.sasl_user)
    tls_ports = (
        dict(zip(("SSL", "MTLS", "SASL_SSL"), args.tls_ports)) if args.tls else None
    )
    # The broker's other listeners, by port: the plain one must not take theirs.
    others = {port: name for name, port in (tls_ports or {}).items() if port}
    if users and args.sasl_port:
        others[args.sasl_port] = "SASL_PLAINTEXT"
    port = args.port
    if port is None:
        port = _plain_port(args.env, others)
    elif port in others:
        raise ValueError(
            f"--port {port} is the {others[port]} listener's too: give another "
            "(0: any free one)"
        )
    return broker.start(
        args.data_dir,
        port,
        sasl_users=users,
        sasl_port=args.sasl_port,
        heap=args.heap,
        timeout=args.timeout,
        tls_ports=tls_ports,
    )


def _plain_port(env: str, others: dict[int, str]) -> int:
    """The PLAINTEXT listener's port: that of ``kafka.bootstrap_servers``
    unless one of ``others`` (the broker's other listeners) has it, as when
    the project talks to the SASL_SSL one; then Kafka's usual 9092, or any
    free port (0) if that is taken."""
    try:
        servers = kafka_conf(env)[0]["bootstrap_servers"]
    except ValueError:  # conf/<env> not written yet: Kafka's usual port
        servers = "localhost:9092"
    port = int(servers.split(",")[0].rpartition(":")[2])
    if port not in others:
        return port
    plain = 9092 if 9092 not in others and port_is_free(9092) else 0
    say(
        f"kafka.bootstrap_servers of conf/{env} ({servers}) is the {others[port]} "
        f"listener's: the PLAINTEXT listener takes {plain or 'a free port'}",
        file=sys.stderr,
    )
    return plain


def _sasl_users(specs: list[str] | None) -> dict[str, str]:
    """``{user: password}`` of ``--sasl-user USER`` options: the password the
    project's credentials read, $KAFKA_SASL_PASSWORD, else asked for on a
    terminal; never from the command line (where `ps` and the shell's history
    would show it)."""
    users = {}
    for spec in specs or []:
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


def write_tls_files(args: argparse.Namespace) -> int:
    """The files docker-compose.tls.yml mounts: the CA and stores and, with
    ``--sasl-user``, the broker's JAAS file."""
    folder = ensure_tls_files(args.data_dir / "tls")
    say(f"TLS files (CA, key stores, their password): {folder}")
    users = _sasl_users(args.sasl_user)
    if users:
        jaas = broker.write_jaas_file(folder / "broker-jaas.conf", users)
        say(f"PLAIN logins of {', '.join(users)}: {jaas}")
    return 0


def run_registry(args: argparse.Namespace) -> int:
    if args.command == "reset":
        registry.reset(args.data_dir)
        return 0
    if args.command != "start":
        return stop_or_status(args, registry.STATE_FILE, "registry")
    port = args.port
    if port is None:
        try:
            address = kafka_conf(args.env)[0].get("schema_registry_url")
        except ValueError:  # conf/<env> not written yet
            address = None
        port = urllib.parse.urlsplit(address).port if address else None
    state = registry.start(
        args.data_dir,
        port or registry.DEFAULT_PORT,
        heap=args.heap,
        timeout=args.timeout,
    )
    say(state["url"])
    return 0


def stop_or_status(args: argparse.Namespace, state_file: str, what: str) -> int:
    """``stop`` or ``status`` of what ``state_file`` in ``--data-dir`` records."""
    if args.command == "stop":
        stopped = stop_recorded(args.data_dir, state_file, args.grace)
        say(f"Stopped the {what}." if stopped else f"The {what} was not running.")
        return 0
    state = spark.status(args.data_dir, state_file)
    say(json.dumps(state, indent=2))
    return 0 if state["running"] else 3


def spark_settings(env: str) -> dict[str, str]:
    """``conf/<env>``'s spark.yml, as Spark takes settings: text."""
    spark_yml = project_config(env)["spark"]
    return {key: str(value) for key, value in spark_yml.items() if value is not None}


def run_cluster(args: argparse.Namespace) -> int:
    if args.command != "start":
        return stop_or_status(args, spark.CLUSTER_STATE, "cluster")
    state = spark.start_cluster(
        args.data_dir,
        port=args.port,
        workers=args.workers,
        cores=args.cores,
        memory=args.memory,
        timeout=args.timeout,
    )
    say(
        f"Spark standalone cluster: {args.workers} worker(s), web UI {state['ui_url']}",
        file=sys.stderr,
    )
    say(state["master_url"])
    return 0


def run_connect(args: argparse.Namespace) -> int:
    if args.command != "start":
        return stop_or_status(args, spark.CONNECT_STATE, "server")
    settings = spark_settings(args.env)
    master = args.master or settings.get("spark.master", "local[2]")
    state = spark.start_connect(
        args.data_dir, settings, port=args.port, master=master, timeout=args.timeout
    )
    say(f"Spark Connect server on {master}, log {args.data_dir}", file=sys.stderr)
    say(state["remote"])
    return 0


def run_submit(args: argparse.Namespace) -> int:
    kedro_args = (
        args.kedro_args[1:] if args.kedro_args[:1] == ["--"] else args.kedro_args
    )
    command, env = submit_command(args.env, kedro_args)
    say(shlex.join(command), file=sys.stderr)
    return 0 if args.dry_run else subprocess.call(command, env=env)


def submit_command(env: str, kedro_args: list[str]) -> tuple[list[str], dict]:
    """spark-submit of the packaged project (``kedro package``) with ``conf/<env>``.

    Spark's settings come from the environment's spark.yml, written as a
    properties file: spark-submit starts the JVM, so it must resolve the Kafka
    connector (``spark.jars.packages``) itself.
    """
    package = project_config(env)["package_name"]
    dist = Path("dist")
    wheels = sorted(dist.glob(f"{package}-*.whl"))
    conf_archive = dist / f"conf-{package}.tar.gz"
    if not wheels or not conf_archive.is_file():
        raise ValueError("dist/ holds no packaged project: run `kedro package` first")
    settings = spark_settings(env)
    if settings.get("spark.remote"):
        raise ValueError(
            f"conf/{env} uses Spark Connect (spark.remote): run it with "
            f"`kedro run --env {env}`; spark-submit needs a spark.master"
        )
    properties = dist / f"spark-{env}.conf"
    properties.write_text(
        "".join(  # a Java properties file: backslashes are escapes
            f"{key} {value.replace(chr(92), chr(92) * 2)}\n"
            for key, value in sorted(settings.items())
        )
    )
    # The runtime goes with the project: executors import it to run what the
    # project's nodes hand them (a foreachBatch function, a UDF).
    runtime = _runtime_archive(dist)
    entry_point = dist / "kedro_run.py"
    entry_point.write_text(ENTRY_POINT.format(package=package))
    command = [
        str(spark.SPARK_HOME / "bin" / "spark-submit"),
        *("--properties-file", str(properties)),
        *("--py-files", f"{wheels[-1]},{runtime}"),
        str(entry_point),
        *("--env", env, "--conf-source", str(conf_archive)),
        *kedro_args,
    ]
    # The driver needs the project's dependencies: by default, this Python's.
    python = {
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "PYSPARK_DRIVER_PYTHON": os.environ.get(
            "PYSPARK_DRIVER_PYTHON", sys.executable
        ),
    }
    return command, {**os.environ, **python}


def _runtime_archive(dist: Path) -> Path:
    """The installed kedro_streaming package as a zip for ``--py-files``."""
    import kedro_streaming  # noqa: PLC0415

    package = Path(kedro_streaming.__file__).parent
    base = dist / f"kedro_streaming-{kedro_streaming.__version__}"
    archive = shutil.make_archive(
        str(base), "zip", root_dir=package.parent, base_dir=package.name
    )
    return Path(archive)


ENTRY_POINT = '''"""spark-submit's entry point: runs the packaged project as `kedro run` would."""

import sys

from {package}.__main__ import main

main(sys.argv[1:])
'''


def parser() -> argparse.ArgumentParser:
    """The command line: ``<tool> <command> [options]``."""
    main = argparse.ArgumentParser(
        prog="kedro streams", description=__doc__.split("\n\n")[0]
    )
    tools = main.add_subparsers(dest="tool", required=True)

    kafka = tools.add_parser("broker", help="a local Kafka broker, without Docker")
    kafka.set_defaults(run=run_broker)
    commands = kafka.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="start it, detached; wait until ready")
    start.add_argument(
        "--port",
        type=int,
        help="the PLAINTEXT listener's (default: that of kafka.bootstrap_servers, "
        "unless a TLS or SASL listener has it; 0: any)",
    )
    start.add_argument(
        "--sasl-user",
        action="append",
        metavar="USER",
        help="add a SASL_PLAINTEXT listener (and SASL_SSL with --tls) with this "
        "user, for PLAIN and SCRAM-SHA-512 (repeatable); the password is "
        "$KAFKA_SASL_PASSWORD, or asked for on a terminal",
    )
    start.add_argument("--sasl-port", type=int)
    start.add_argument(
        "--tls",
        action="store_true",
        help="add TLS listeners (SSL, mutual TLS, SASL_SSL with PLAIN and "
        "SCRAM-SHA-512) with a private CA kept in --data-dir/tls",
    )
    start.add_argument(
        "--tls-ports",
        type=int,
        nargs=3,
        default=(9093, 9094, 9095),
        metavar=("SSL", "MTLS", "SASL_SSL"),
        help="their ports (default 9093 9094 9095)",
    )
    start.add_argument("--heap", default="512m", help="JVM heap (default 512m)")
    start.add_argument("--timeout", type=float, default=90, help="seconds to start")
    stop = commands.add_parser("stop", help="stop it; the data stays")
    stop.add_argument("--grace", type=float, default=20.0, help="seconds to SIGKILL")
    status = commands.add_parser("status", help="its state (exit 3 unless it runs)")
    reset = commands.add_parser("reset", help="stop it and delete its data")
    tls_files = commands.add_parser(
        "tls-files",
        help="make the CA and stores (and, with --sasl-user, a JAAS file) "
        "that docker-compose.tls.yml mounts",
    )
    add_users = commands.add_parser(
        "add-users", help="add SCRAM-SHA-512 logins to a running broker"
    )
    add_users.add_argument(
        "--bootstrap-servers",
        help="its PLAINTEXT listener (default: the one `broker start` runs, "
        "else localhost:9092, the compose broker's)",
    )
    for command in (tls_files, add_users):
        command.add_argument(
            "--sasl-user",
            action="append",
            required=command is add_users,
            metavar="USER",
            help="a login (repeatable); its password $KAFKA_SASL_PASSWORD, or "
            "asked for on a terminal",
        )
    for command in (start, stop, status, reset, tls_files, add_users):
        command.add_argument("--data-dir", type=Path, default=broker.DATA_DIR)
    start.add_argument("--env", default="kafka", help="conf/<env> (default kafka)")

    add_registry_commands(tools)
    add_kafka_commands(tools)
    add_spark_commands(tools)
    return main


def add_registry_commands(tools) -> None:
    """``registry start|stop|status|reset``."""
    tool = tools.add_parser(
        "registry", help="a local schema registry (Apicurio), without Docker"
    )
    tool.set_defaults(run=run_registry)
    commands = tool.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="start it, detached; wait until ready")
    start.add_argument(
        "--port", type=int, help="default: that of kafka.schema_registry_url, or 8081"
    )
    start.add_argument("--heap", default="256m", help="JVM heap (default 256m)")
    start.add_argument("--timeout", type=float, default=180, help="seconds to start")
    start.add_argument("--env", default="kafka", help="conf/<env> (default kafka)")
    stop = commands.add_parser("stop", help="stop it; the schemas stay")
    stop.add_argument("--grace", type=float, default=20.0, help="seconds to SIGKILL")
    status = commands.add_parser("status", help="its state (exit 3 unless it runs)")
    reset = commands.add_parser("reset", help="stop it and delete its schemas")
    for command in (start, stop, status, reset):
        command.add_argument("--data-dir", type=Path, default=registry.DATA_DIR)


def _start_stop_status(tool, start_help: str) -> argparse.ArgumentParser:
    """The ``start``, ``stop`` and ``status`` commands of a tool; returns ``start``."""
    commands = tool.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help=start_help)
    stop = commands.add_parser("stop", help="stop it")
    status = commands.add_parser("status", help="its state (exit 3 unless it runs)")
    for command in (start, stop, status):
        command.add_argument("--data-dir", type=Path, default=spark.DATA_DIR)
    stop.add_argument("--grace", type=float, default=20.0, help="seconds to SIGKILL")
    return start


def add_kafka_commands(tools) -> None:
    """``send`` and ``watch``: any records to and from a topic."""
    send = tools.add_parser("send", help="send JSON lines (a file, or - for stdin)")
    send.set_defaults(run=run_send)
    send.add_argument("file", type=Path, help="one message per line; - reads stdin")
    send.add_argument("--key", help="key each message by this field of its JSON")
    send.add_argument("--rate", type=float, default=0.0, help="messages per second")
    send.add_argument(
        "--partitions", type=int, default=2, help="partitions of a new topic"
    )
    send.add_argument(
        "--max-message-bytes",
        type=int,
        metavar="N",
        help="the largest message sent (the producer's max.request.size, "
        f"default {kafka.MAX_REQUEST_SIZE}), and of a new topic "
        "(its max.message.bytes)",
    )
    watch = tools.add_parser(
        "watch", help="print a topic's messages (key<TAB>value, or Avro as JSON)"
    )
    watch.set_defaults(run=run_watch)
    watch.add_argument(
        "--idle-seconds", type=float, default=0.0, help="stop after this long idle"
    )
    watch.add_argument(
        "--avro",
        action=argparse.BooleanOptionalAction,
        help="decode Avro in Confluent's wire format through "
        "kafka.schema_registry_url, one JSON line per message (default: when "
        "the registry has the subject <topic>-value)",
    )
    for command in (send, watch):
        command.add_argument("--topic", required=True)
        command.add_argument(
            "--bootstrap-servers", help="default: kafka.bootstrap_servers of --env"
        )
        command.add_argument(
            "--env", default="local", help="conf/<env> for the broker and credentials"
        )


def add_spark_commands(tools) -> None:
    """``cluster``, ``connect`` and ``submit``."""
    cluster = tools.add_parser("cluster", help="a Spark standalone cluster")
    cluster.set_defaults(run=run_cluster)
    start = _start_stop_status(cluster, "start a master and workers, detached")
    start.add_argument("--port", type=int, default=7077, help="the master's port")
    start.add_argument("--workers", type=int, default=1)
    start.add_argument("--cores", type=int, default=2, help="cores per worker")
    start.add_argument("--memory", default="4g", help="memory per worker")
    start.add_argument("--timeout", type=float, default=90, help="seconds to start")

    connect = tools.add_parser("connect", help="a Spark Connect server")
    connect.set_defaults(run=run_connect)
    start = _start_stop_status(connect, "start it, detached; wait until ready")
    start.add_argument("--port", type=int, default=15002, help="its gRPC port")
    start.add_argument(
        "--master", help="where it runs queries (default: spark.master of --env)"
    )
    start.add_argument(
        "--env", default="local", help="conf/<env> whose spark.yml sets it up"
    )
    start.add_argument("--timeout", type=float, default=180, help="seconds to start")

    submit = tools.add_parser(
        "submit", help="spark-submit the packaged project (`kedro package` first)"
    )
    submit.set_defaults(run=run_submit)
    submit.add_argument("--env", default="cluster", help="conf/<env> (default cluster)")
    submit.add_argument(
        "--dry-run", action="store_true", help="print the command, do not run it"
    )
    submit.add_argument(
        "kedro_args", nargs=argparse.REMAINDER, help="more `kedro run` options"
    )


def main(argv: list[str] | None = None) -> int:
    """Runs one command; returns its exit code."""
    # kafka-python warns on every refused connection while a broker starts.
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except (broker.BrokerError, ProcessError, KafkaError, ValueError) as error:
        sys.stderr.write(f"error: {error}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
