"""``python -m kedro_streaming.devtools``: the development services of
``kedro streams`` (:data:`kedro_streaming._cli.COMMANDS`), without Kedro's CLI."""

import click

from kedro_streaming._cli import DEV_SERVICES, LazyGroup


@click.group(cls=LazyGroup, lazy=DEV_SERVICES)
def main() -> None:
    """Development services of a streaming project, run from the project root.

    Each command reads what it needs (the broker address, topics and
    credentials, Spark settings) from conf/<env>, as `kedro run --env <env>`
    does.
    """
