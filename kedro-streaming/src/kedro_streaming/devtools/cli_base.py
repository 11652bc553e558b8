"""What the development services' commands share: how they end (an exit
code, or one ``error:`` line) and their common options."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click
from kafka.errors import KafkaError

from kedro_streaming.devtools import spark
from kedro_streaming.devtools.broker_jars import BrokerError
from kedro_streaming.devtools.processes import ProcessError, say, stop_recorded

# A service that does not start or a setting that does not work: said in one
# line, not a traceback.
FAILURES = (BrokerError, ProcessError, KafkaError, ValueError)


class ServiceCommand(click.Command):
    """A command whose function returns its exit code (``status``: 3 unless
    the service runs) and whose failures are one ``error: ...`` line, exit 1."""

    def invoke(self, ctx: click.Context):
        # kafka-python warns on every refused connection while a broker starts.
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
        try:
            code = super().invoke(ctx)
        except FAILURES as error:
            say(f"error: {error}", file=sys.stderr)
            ctx.exit(1)
        if code:
            ctx.exit(code)


class ServiceGroup(click.Group):
    """A service's commands (``start``, ``stop``, ...), each a :class:`ServiceCommand`."""

    command_class = ServiceCommand


def data_dir_option(default: Path):
    return click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=default,
        show_default=True,
        help="the service's state, data and log",
    )


grace_option = click.option(
    "--grace", type=float, default=20.0, help="seconds to SIGKILL (default 20)"
)


def add_stop_and_status(
    group: click.Group,
    with_data_dir,
    state_file: str,
    what: str,
    stop_help: str = "Stop it.",
) -> None:
    """``stop`` and ``status`` of the service ``state_file`` in --data-dir records."""

    @group.command(help=stop_help)
    @grace_option
    @with_data_dir
    def stop(grace: float, data_dir: Path) -> int:
        stopped = stop_recorded(data_dir, state_file, grace)
        say(f"Stopped the {what}." if stopped else f"The {what} was not running.")
        return 0

    @group.command()
    @with_data_dir
    def status(data_dir: Path) -> int:
        """Its state (exit 3 unless it runs)."""
        state = spark.status(data_dir, state_file)
        say(json.dumps(state, indent=2))
        return 0 if state["running"] else 3
