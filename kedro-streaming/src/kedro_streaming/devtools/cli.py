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

import click

from kedro_streaming.devtools.cli_base import ServiceGroup
from kedro_streaming.devtools.cli_broker import broker_group
from kedro_streaming.devtools.cli_registry import registry_group
from kedro_streaming.devtools.cli_spark import (
    cluster_group,
    connect_group,
    submit,
    submit_command,
)
from kedro_streaming.devtools.cli_topics import send, watch

__all__ = ["main", "submit_command"]


@click.group(cls=ServiceGroup)
def main() -> None:
    """Development services of a streaming project, run from the project root.

    Each command reads what it needs (the broker address, topics and
    credentials, Spark settings) from conf/<env>, as `kedro run --env <env>`
    does.
    """


for _command in (
    broker_group,
    registry_group,
    cluster_group,
    connect_group,
    submit,
    send,
    watch,
):
    main.add_command(_command)
