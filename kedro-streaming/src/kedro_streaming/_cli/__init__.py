"""``kedro streams``: every command (``COMMANDS``), imported only to run or show
its help. Kedro finds ``commands`` through this distribution's entry point."""

from __future__ import annotations

import ast
import importlib.util
import os
from functools import partial
from pathlib import Path
from typing import Any

import click

from kedro_streaming.errors import StreamingConfigError, StreamingQueryFailed

# Every `kedro streams` command, as "module:attribute". Those of devtools need
# the [dev] extra; `python -m kedro_streaming.devtools` runs them alone.
COMMANDS = {
    "status": "kedro_streaming._cli.sinks:status",
    "validate": "kedro_streaming._cli.validate:validate",
    "reset": "kedro_streaming._cli.sinks:reset",
    "state": "kedro_streaming._cli.state:state",
    "capture": "kedro_streaming._cli.capture:capture",
    "spark-line": "kedro_streaming._cli.spark_line:spark_line",
    "optimize": "kedro_streaming._cli.sinks:optimize",
    "vacuum": "kedro_streaming._cli.sinks:vacuum",
    "broker": "kedro_streaming.devtools.cli_broker:broker_group",
    "registry": "kedro_streaming.devtools.cli_registry:registry_group",
    "cluster": "kedro_streaming.devtools.cli_spark:cluster_group",
    "connect": "kedro_streaming.devtools.cli_spark:connect_group",
    "submit": "kedro_streaming.devtools.cli_spark:submit",
    "send": "kedro_streaming.devtools.cli_topics:send",
    "watch": "kedro_streaming.devtools.cli_topics:watch",
    "feed": "kedro_streaming.devtools.cli_feed:feed",
}
_DEVTOOLS = "kedro_streaming.devtools."
DEV_SERVICES = {n: p for n, p in COMMANDS.items() if p.startswith(_DEVTOOLS)}
MISSING = (
    "the development services need kedro-streaming[dev]: "
    'pip install "kedro-streaming[dev]"'
)


def dev_extra_missing(path: str = _DEVTOOLS) -> bool:
    """Whether the command at ``path`` needs the [dev] extra, not installed."""
    return path.startswith(_DEVTOOLS) and importlib.util.find_spec("fastavro") is None


def say_dev_extra_missing() -> None:
    """Exits 1 with one line saying how to install the [dev] extra."""
    click.echo(MISSING, err=True)
    raise SystemExit(1)


_NEEDS_DEV_EXTRA = "A development service (needs kedro-streaming[dev])."


def _needs_dev_extra(name: str) -> click.Command:
    """``name`` without the [dev] extra: says so, whatever the arguments (not
    raised here: kedro-telemetry lists every command before one runs)."""
    return click.Command(
        name,
        callback=say_dev_extra_missing,
        help=_NEEDS_DEV_EXTRA,
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


class LazyGroup(click.Group):
    """The commands of ``lazy`` (name: "module:attribute"), imported as needed."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.lazy)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy:
            return None
        if dev_extra_missing(self.lazy[cmd_name]):
            return _needs_dev_extra(cmd_name)
        module, _, attribute = self.lazy[cmd_name].partition(":")
        return getattr(importlib.import_module(module), attribute)

    def format_commands(self, ctx: click.Context, formatter) -> None:
        # Each short help read from its function's docstring: importing the
        # commands would import Spark and Kedro's session, seconds for a list.
        limit = formatter.width - 6 - max(map(len, self.lazy))
        rows = [
            (name, _short_help(self.lazy[name], limit)) for name in sorted(self.lazy)
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _short_help(path: str, limit: int) -> str:
    if dev_extra_missing(path):
        return _NEEDS_DEV_EXTRA
    module, _, attribute = path.partition(":")
    tree = ast.parse(Path(importlib.util.find_spec(module).origin).read_bytes())
    [node] = [node for node in tree.body if getattr(node, "name", "") == attribute]
    command = click.Command(attribute, help=ast.get_docstring(node))
    return command.get_short_help_str(limit)


@click.group(name="kedro-streaming")
def commands() -> None:
    """Commands of the kedro-streaming plugin."""


class _Streams(LazyGroup):
    """Prints a configuration error, or a failed query, as its one-line
    message (its cause and fix), as ``kedro run`` does, without the trace."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (StreamingConfigError, StreamingQueryFailed) as error:
            click.echo(f"{type(error).__name__}: {error}", err=True)
            ctx.exit(1)


@commands.group(name="streams", cls=_Streams, lazy=COMMANDS)
@click.pass_context
def streams(ctx: click.Context) -> None:
    """Operate the streaming queries and their tables."""
    # Kedro finds the project from any folder inside it; the project's
    # relative paths (data/streams, data/kafka-broker, the catalog's) are
    # the project folder's, as for `kedro run` there.
    root = getattr(ctx.obj, "project_path", None)
    if root is not None and Path.cwd().resolve() != Path(root).resolve():
        ctx.call_on_close(partial(os.chdir, Path.cwd()))
        os.chdir(root)
