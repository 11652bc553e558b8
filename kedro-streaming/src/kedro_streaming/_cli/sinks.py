"""``kedro streams status | reset | optimize | vacuum``: the streaming sinks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import fsspec
from kedro.framework.cli.utils import env_option
from kedro.framework.project import pipelines as registered_pipelines

from kedro_streaming._checkpoint import Checkpoint
from kedro_streaming._checks.spec import RunSpec
from kedro_streaming._cli.project import _open, pipelines_option, queried
from kedro_streaming._connectors import delta
from kedro_streaming._connectors.base import LagUnknown
from kedro_streaming._connectors.changes import describe_outcomes
from kedro_streaming._dataset import SparkStreamingDataset
from kedro_streaming._observe.progress import describe_expectations
from kedro_streaming._observe.state_operators import StateOperator, describe_state
from kedro_streaming._session.session import spark_session


@click.command()
@env_option
@pipelines_option
@click.pass_obj
def status(metadata, env: str | None, pipelines: list[str]) -> None:
    """One line per streaming sink of every pipeline (or those of
    --pipelines): where its query stands. Starts no query."""
    project = _open(metadata, env, pipelines or list(registered_pipelines))
    totals = project.state.totals()
    running = project.state.running()
    unreadable: list[str] = []
    for name, dataset in queried(project).items():
        checkpoint = _checkpoint_state(dataset.checkpoint)
        parts = []
        if checkpoint["committed"] is None:
            parts.append("no batch committed yet")
        else:
            parts.append(
                f"batch {checkpoint['committed']} committed {checkpoint['when']}"
            )
        if checkpoint["pending"] is not None:
            parts.append(
                f"uncommitted batch {checkpoint['pending']} (the next run redoes it)"
            )
        parts += dataset.connector.sink_figures(dataset)
        parts += _described_totals(totals.get(name))
        info = running.get(name)
        parts.append(
            f"running (pid {info['pid']} on {info['host']})" if info else "not running"
        )
        for source, entry in project.sources_of(name).items():
            try:
                lag = entry.connector.unread(entry, checkpoint["offsets"])
            except LagUnknown as error:
                lag, unreadable = "unknown", [*unreadable, f"{source}: {error}"]
            if lag is not None:
                parts.append(f"{source} lag {lag}")
        click.echo(f"{name}: " + " · ".join(parts))
    if unreadable:
        # Said once per source, after every line: the lag it could not read.
        raise _Unreadable(
            "the lag could not be read: " + "; ".join(dict.fromkeys(unreadable))
        )


def _described_totals(query_totals: dict[str, Any] | None) -> list[str]:
    """A query's totals for its status line, and its state after its last batch."""
    if not query_totals:
        return []
    # A table kept from changes is handed changes, not rows: what became of
    # them follows.
    kept = "changes handed to the table" if "changes" in query_totals else None
    written = (
        f"{query_totals['rows_written']} {kept or 'rows written'} in "
        f"{query_totals['batches']} batches"
    )
    if query_totals.get("quarantined") or query_totals.get("expectations"):
        written += f", {query_totals['quarantined']} quarantined"
        written += describe_expectations(query_totals.get("expectations", {}))
    if query_totals.get("changes"):
        written += ": " + describe_outcomes(
            query_totals["changes"], query_totals.get("versions", {})
        )
    if query_totals.get("late_state_rows_dropped"):
        written += (
            f", {query_totals['late_state_rows_dropped']} late state rows dropped"
        )
    unlogged = query_totals.get("unlogged_batches", 0)
    if unlogged:
        them, their = ("it", "its") if unlogged == 1 else ("them", "their")
        written += (
            f", and {unlogged} {'batch' if unlogged == 1 else 'batches'} committed "
            f"but not logged (a run killed before it logged {them}: {their} rows "
            "are not counted)"
        )
    parts = [written]
    if query_totals.get("state_operators"):
        operators = [StateOperator(**op) for op in query_totals["state_operators"]]
        parts.append(f"state after its last batch: {describe_state(operators)}")
    return parts


def _checkpoint_state(checkpoint: str) -> dict[str, Any]:
    """The last committed batch, a started but uncommitted one, and offsets."""
    folder = Checkpoint(checkpoint)
    committed, offsets = folder.committed, folder.batches("offsets")
    pending = (
        offsets[-1]
        if offsets and (committed is None or offsets[-1] > committed)
        else None
    )
    result = {"committed": committed, "pending": pending, "when": None, "offsets": []}
    if committed is not None:
        moment = folder.committed_at(committed)
        result["when"] = moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "?"
        result["offsets"] = [
            offset
            for _name, offset in folder.offsets(committed).sources
            if isinstance(offset, dict)
        ]
    return result


class _Unreadable(click.ClickException):
    """What ``status`` reports but could not read; it exits 1."""


@click.command()
@click.argument("datasets", nargs=-1, required=True)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--only",
    is_flag=True,
    help="Reset only the named sinks, not the streams that read them.",
)
@env_option
@pipelines_option
@click.pass_obj
def reset(
    metadata,
    *,  # click passes the options by name
    datasets: tuple[str, ...],
    yes: bool,
    only: bool,
    env: str | None,
    pipelines: list[str],
) -> None:
    """Removes streaming sinks' data and checkpoints (a full refresh).

    By default also every streaming sink that reads them, directly or
    through other streams, in all pipelines (or those of --pipelines).
    """
    project = _open(metadata, env, pipelines or list(registered_pipelines))
    sinks = queried(project)
    for name in datasets:
        if name not in sinks:
            raise click.ClickException(
                f"'{name}' is not a streaming sink of these pipelines: reset removes "
                "a streaming table and its checkpoint, and nothing else."
            )
    targets = set(datasets) if only else _with_readers(project, set(datasets))
    running = set(project.state.running()) & targets
    if running:
        raise click.ClickException(
            f"{', '.join(sorted(running))} running: stop that run before a reset."
        )
    plan = []
    for name in sorted(targets):
        dataset = sinks[name]
        if not dataset.path:
            plan.append((name, [dataset.checkpoint]))
            kept = dataset.connector.kept_by_reset(dataset)
            click.echo(
                f"{name}: checkpoint {_shown(dataset.checkpoint)}."
                + (f" {kept}" if kept else "")
            )
        else:
            plan.append((name, [dataset.path, dataset.checkpoint]))
            click.echo(
                f"{name}: table {_shown(dataset.path)} and checkpoint "
                f"{_shown(dataset.checkpoint)}"
            )
    if not yes:
        click.confirm("Remove them?", abort=True)
    for name, paths in plan:
        for path in paths:
            fs, root = fsspec.core.url_to_fs(path)
            if fs.exists(root):
                fs.rm(root, recursive=True)
    project.state.forget(targets)
    click.echo(f"Reset {', '.join(sorted(targets))}.")


def _shown(path: str) -> str:
    """``path`` as the project's catalog would write it: inside the project's
    folder (where the command runs), relative to it."""
    local = Path(path.removeprefix("file://"))
    if "://" in path.removeprefix("file://") or not local.is_absolute():
        return path
    return (
        str(local.relative_to(Path.cwd())) if local.is_relative_to(Path.cwd()) else path
    )


@click.command()
@click.argument("datasets", nargs=-1)
@env_option
@pipelines_option
@click.pass_obj
def optimize(metadata, datasets: tuple[str, ...], env: str | None, pipelines):
    """Compacts the Delta tables of streaming sinks (all, or DATASETS).

    Streams writing or reading them may keep running: the compaction changes
    no data, and stream readers skip it.
    """
    project = _open(metadata, env, pipelines or list(registered_pipelines))
    spark = spark_session()
    for name, dataset in _delta_tables(project, datasets).items():
        metrics = delta.optimize(spark, dataset.path)
        click.echo(
            f"{name}: {metrics['numFilesRemoved']} files compacted into "
            f"{metrics['numFilesAdded']}, Delta version {delta.table_version(dataset.path)}"
        )


@click.command()
@click.argument("datasets", nargs=-1)
@click.option(
    "--retain-hours",
    type=float,
    default=168.0,
    show_default=True,
    help="Keep files removed less than this long ago (time travel needs them).",
)
@env_option
@pipelines_option
@click.pass_obj
def vacuum(
    metadata,
    datasets: tuple[str, ...],
    retain_hours: float,
    env: str | None,
    pipelines,
):
    """Deletes files the Delta tables of streaming sinks (all, or DATASETS) no
    longer use, once removed for longer than --retain-hours.

    Versions older than that can no longer be read (time travel). Delta
    refuses less than 168 hours unless the environment's spark.yml sets
    spark.databricks.delta.retentionDurationCheck.enabled: false; below the
    longest micro-batch, a running stream's files could be deleted.
    """
    project = _open(metadata, env, pipelines or list(registered_pipelines))
    spark = spark_session()
    for name, dataset in _delta_tables(project, datasets).items():
        deleted = delta.vacuum(spark, dataset.path, retain_hours)
        click.echo(f"{name}: {deleted} unused files deleted")


def _delta_tables(
    project: RunSpec, names: tuple[str, ...]
) -> dict[str, SparkStreamingDataset]:
    """The named streaming sinks (all by default) whose tables are Delta."""
    tables = {
        name: dataset
        for name, dataset in queried(project).items()
        if isinstance(dataset.connector, delta.Delta)
    }
    unknown = [name for name in names if name not in tables]
    if unknown or not tables:
        raise click.ClickException(
            f"{', '.join(unknown) or 'These pipelines'}: no Delta table of a "
            f"streaming sink in this environment ({', '.join(tables) or 'none'}). "
            "Delta tables are declared with `file_format: delta` (see --env delta)."
        )
    return {name: tables[name] for name in names} if names else tables


def _with_readers(project: RunSpec, names: set[str]) -> set[str]:
    """``names`` and every streaming sink that reads them, directly or not."""
    found = set(names)
    for name in names:
        if any(name in node.inputs for node in project.pipeline.nodes):
            downstream = project.pipeline.from_inputs(name).all_outputs()
            found |= {output for output in downstream if output in queried(project)}
    return found
