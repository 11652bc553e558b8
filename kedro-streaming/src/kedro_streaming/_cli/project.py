"""What ``kedro streams``' commands share: ``--pipelines``, the project opened."""

from __future__ import annotations

import difflib

import click
from kedro.framework.cli.utils import split_string
from kedro.framework.project import pipelines as registered_pipelines
from kedro.framework.session import KedroSession
from kedro.pipeline import Pipeline

from kedro_streaming._checks.spec import RunSpec
from kedro_streaming._dataset import SparkStreamingDataset
from kedro_streaming._observe.state import streaming_settings

pipelines_option = click.option(
    "--pipelines",
    "-p",
    type=str,
    default="",
    callback=split_string,
    help="Comma-separated pipelines, as for `kedro run` (by default "
    "`validate` checks __default__, the other commands every pipeline).",
)


def _open(
    metadata, env: str | None, names: list[str], params: dict | None = None
) -> RunSpec:
    """The run of the named pipelines (``__default__``), as ``kedro run``
    would read it."""
    session = KedroSession.create(
        project_path=metadata.project_path, env=env, runtime_params=params or None
    )
    context = session.load_context()
    selected = names or ["__default__"]
    unknown = [name for name in selected if name not in registered_pipelines]
    if unknown:
        raise click.ClickException(f"No pipeline named {', '.join(unknown)}.")
    pipeline = sum((registered_pipelines[name] for name in selected), Pipeline([]))
    return RunSpec.read(
        context.catalog,
        pipeline,
        streaming_settings(context.config_loader),
        env=env,
        project_path=metadata.project_path,
        config_loader=context.config_loader,
    )


def queried(run: RunSpec) -> dict[str, SparkStreamingDataset]:
    """The streaming sinks of the run that have a checkpoint: one query each."""
    return {name: sink for name, sink in run.sinks.items() if sink.checkpoint}


def streaming_sink(run: RunSpec, sink: str) -> SparkStreamingDataset:
    """The catalog's streaming sink ``sink`` that has a checkpoint; else the
    closest such name and all of them, in one line."""
    dataset = run.catalog[sink] if sink in run.catalog else None
    if isinstance(dataset, SparkStreamingDataset) and dataset.checkpoint:
        return dataset
    sinks = [
        name
        for name in run.catalog.keys()
        if isinstance(entry := run.catalog[name], SparkStreamingDataset)
        and entry.checkpoint
    ]
    close = difflib.get_close_matches(sink, sinks, n=1)
    raise click.ClickException(
        f"'{sink}' is not a streaming sink with a checkpoint in the catalog"
        + (f": did you mean '{close[0]}'?" if close else ".")
        + f" Those are: {', '.join(sorted(sinks)) or 'none'}."
    )
