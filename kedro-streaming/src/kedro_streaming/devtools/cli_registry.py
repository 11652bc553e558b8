"""``registry start|stop|status|reset``: a local schema registry (Apicurio)."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import click

from kedro_streaming.devtools import registry
from kedro_streaming.devtools.cli_base import (
    ServiceGroup,
    add_stop_and_status,
    data_dir_option,
)
from kedro_streaming.devtools.config import kafka_conf
from kedro_streaming.devtools.processes import say

with_data_dir = data_dir_option(registry.DATA_DIR)


@click.group("registry", cls=ServiceGroup)
def registry_group() -> None:
    """A local schema registry (Apicurio), without Docker."""


@registry_group.command()
@click.option(
    "--port", type=int, help="default: that of kafka.schema_registry_url, or 8081"
)
@click.option("--heap", default="256m", help="JVM heap (default 256m)")
@click.option("--timeout", type=float, default=180, help="seconds to start")
@click.option("--env", default="kafka", help="conf/<env> (default kafka)")
@with_data_dir
def start(port: int | None, heap: str, timeout: float, env: str, data_dir: Path) -> int:
    """Start it, detached; wait until ready."""
    if port is None:
        try:
            address = kafka_conf(env)[0].get("schema_registry_url")
        except ValueError:  # conf/<env> not written yet
            address = None
        port = urllib.parse.urlsplit(address).port if address else None
    state = registry.start(
        data_dir, port or registry.DEFAULT_PORT, heap=heap, timeout=timeout
    )
    say(state["url"])
    return 0


add_stop_and_status(
    registry_group,
    with_data_dir,
    registry.STATE_FILE,
    "registry",
    "Stop it; the schemas stay.",
)


@registry_group.command()
@with_data_dir
def reset(data_dir: Path) -> int:
    """Stop it and delete its schemas."""
    registry.reset(data_dir)
    return 0
