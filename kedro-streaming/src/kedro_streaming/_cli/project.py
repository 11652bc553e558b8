"""What ``kedro streams``' commands share: ``--pipelines``, the project opened."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click
from kedro.framework.cli.utils import split_string
from kedro.framework.project import pipelines as registered_pipelines
from kedro.framework.session import KedroSession
from kedro.io import DataCatalog
from kedro.pipeline import Pipeline

from kedro_streaming._checks.catalog import streaming_datasets
from kedro_streaming._dataset import SparkStreamingDataset
from kedro_streaming._observe.state import StreamState, streaming_settings

pipelines_option = click.option(
    "--pipelines",
    "-p",
    type=str,
    default="",
    callback=split_string,
    help="Comma-separated pipelines, as for `kedro run` (by default "
    "`validate` checks __default__, the other commands every pipeline).",
)


@dataclass
class _Project:
    catalog: DataCatalog
    pipeline: Pipeline
    settings: dict[str, Any]
    state: StreamState
    env: str | None
    config_loader: Any

    @property
    def sinks(self) -> dict[str, SparkStreamingDataset]:
        """The streaming sinks of the selected pipelines: one query each."""
        return {
            name: dataset
            for name, dataset in streaming_datasets(
                self.catalog, self.pipeline.all_outputs()
            ).items()
            if dataset.checkpoint
        }


def _open(
    metadata, env: str | None, names: list[str], params: dict | None = None
) -> _Project:
    session = KedroSession.create(
        project_path=metadata.project_path, env=env, runtime_params=params or None
    )
    context = session.load_context()
    settings = streaming_settings(context.config_loader)
    selected = names or ["__default__"]
    unknown = [name for name in selected if name not in registered_pipelines]
    if unknown:
        raise click.ClickException(f"No pipeline named {', '.join(unknown)}.")
    pipeline = sum((registered_pipelines[name] for name in selected), Pipeline([]))
    state = StreamState.from_settings(settings)
    return _Project(
        context.catalog, pipeline, settings, state, env, context.config_loader
    )
