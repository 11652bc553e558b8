"""A run, read once: its streaming sources, sinks, readers, trigger and
settings, handed to the checks, the dry run, the supervisor, ``validate``
and ``status``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kedro.io import DataCatalog
from kedro.pipeline import Pipeline

from kedro_streaming._checks.catalog import (
    catalog_names_by_env,
    query_sources,
    streaming_datasets,
)
from kedro_streaming._connectors.base import RunEntries
from kedro_streaming._dataset import SparkStreamingDataset
from kedro_streaming._observe.state import StreamState
from kedro_streaming.errors import StreamingConfigError

TRIGGERS = ("processing_time", "available_now")


def sink_read_as(read: str, sinks: Any) -> str | None:
    """The sink among ``sinks`` that a dataset ``read`` by a node is under
    another of its names (Kedro's transcoding: ``zones@changes`` written,
    ``zones@table`` read), or ``None``.

    Example:
        >>> sink_read_as("zones@table", ["zones@changes", "trips"])
        'zones@changes'
        >>> sink_read_as("trips", ["trips"]) is None  # the sink itself
        True
    """
    base = read.split("@", 1)[0]
    if read in sinks or base == read:
        return None
    return next((s for s in sinks if s.split("@", 1)[0] == base), None)


@dataclass(frozen=True)
class RunSpec(RunEntries):
    """One run's streaming entries (what connectors see, ``RunEntries``) with
    its catalog, pipeline, state and where it runs."""

    sources: dict[str, SparkStreamingDataset] = field(default_factory=dict)
    sinks: dict[str, SparkStreamingDataset] = field(default_factory=dict)
    catalog: DataCatalog = field(default_factory=DataCatalog)
    pipeline: Pipeline = field(default_factory=lambda: Pipeline([]))
    state: StreamState | None = None
    env: str | None = None
    project_path: Path | None = None
    config_loader: Any = None

    @classmethod
    def read(
        cls,
        catalog: DataCatalog,
        pipeline: Pipeline,
        settings: dict[str, Any],
        **where: Any,
    ) -> RunSpec:
        """The run of ``pipeline`` on ``catalog``; ``where``: ``env``,
        ``project_path`` and ``config_loader``."""
        sources = streaming_datasets(catalog, pipeline.inputs())
        sinks = streaming_datasets(catalog, pipeline.all_outputs())
        readers: dict[str, list[str]] = {name: [] for name in sources}
        for sink in sinks:
            for name in query_sources(catalog, pipeline, sink):
                readers.setdefault(name, []).append(sink)
        state = StreamState.from_settings(settings)
        return cls(sources, sinks, readers, settings, catalog, pipeline, state, **where)

    @property
    def trigger(self) -> dict[str, Any] | None:
        """The trigger the run's ``trigger`` setting forces on every sink:
        ``{"availableNow": True}`` for ``available_now``; ``None`` for
        ``processing_time``, which leaves each sink its own trigger or the
        ``trigger_interval`` default."""
        return run_trigger(self.settings)

    @property
    def bounded(self) -> bool:
        """Whether every query stops once it has read what is there."""
        return self.trigger is not None

    def triggers(self) -> dict[str, dict[str, Any]]:
        """Each sink's trigger: the run's; else the sink's own; else the
        run's interval."""
        interval = str(self.settings.get("trigger_interval", "10 seconds"))
        return {
            name: self.trigger or dataset.trigger or {"processingTime": interval}
            for name, dataset in self.sinks.items()
        }

    def sources_of(self, sink: str) -> dict[str, SparkStreamingDataset]:
        """The entries the sink's query reads."""
        return self.read_by(sink)  # type: ignore[return-value]

    def other_envs(self) -> dict[str, Any]:
        """The names each other environment's catalog declares."""
        if self.config_loader is None:
            return {}
        return catalog_names_by_env(self.config_loader)


def run_trigger(settings: dict[str, Any]) -> dict[str, Any] | None:
    """The trigger that the run's ``trigger`` setting forces on every sink
    (see ``RunSpec.trigger``); fails on an unknown one."""
    trigger = settings.get("trigger", "processing_time")
    if trigger not in TRIGGERS:
        raise StreamingConfigError(
            f"Unknown trigger '{trigger}': run with `--params trigger=available_now` "
            "(process what is there, then stop) or `--params trigger=processing_time` "
            "(run until stopped)."
        )
    return {"availableNow": True} if trigger == "available_now" else None
