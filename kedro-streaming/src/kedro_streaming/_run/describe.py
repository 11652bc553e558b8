"""A query in words, for the run's lines: its trigger, what it reads, the
Kafka topics a failure message names."""

from __future__ import annotations

from typing import Any

from kedro.io import DataCatalog
from kedro.pipeline import Pipeline

from kedro_streaming._connectors.dataset import SparkStreamingDataset
from kedro_streaming._run.catalog import query_sources


def ends_by_itself(trigger: dict[str, Any] | None) -> bool:
    """Whether a query with ``trigger`` stops once it has read what is there
    (``availableNow``, ``once``).

    Example:
        >>> ends_by_itself({"availableNow": True}), ends_by_itself({"realTime": "2 minutes"})
        (True, False)
    """
    return next(iter(trigger or {}), None) in ("availableNow", "once")


def describe_trigger(trigger: dict[str, Any]) -> str:
    """What a query's trigger means for the run, in words: the start line says
    it, so that a bounded run that keeps going (a `--params` lost) shows why."""
    kind, value = next(iter(trigger.items()))
    if kind == "availableNow":
        return "trigger availableNow, what is there and then it stops"
    if kind == "processingTime":
        return f"a micro-batch every {value}, until Ctrl-C or SIGTERM"
    if kind == "realTime":
        return f"Real-Time Mode, a checkpoint every {value}, until Ctrl-C or SIGTERM"
    return f"trigger {kind}={value}"


def describe_sources(
    catalog: DataCatalog | None, pipeline: Pipeline | None, name: str
) -> str:
    """What a query reads, for its start line: which environment's
    source a run uses shows there."""
    if catalog is None or pipeline is None:
        return "its sources"
    parts = []
    for source, dataset in query_sources(catalog, pipeline, name).items():
        options = dataset.load_options
        topic = options.get("subscribe") or options.get("subscribePattern")
        parts.append(
            f"{source} (Kafka {topic or 'assigned partitions'})"
            if dataset.file_format == "kafka"
            else f"{source} ({dataset.file_format} at {dataset.path})"
            if dataset.path
            else f"{source} ({dataset.file_format})"
        )
    return ", ".join(parts) or "its sources"


def kafka_topics(
    catalog: DataCatalog | None,
    pipeline: Pipeline | None,
    name: str,
    sink: SparkStreamingDataset | None,
) -> str:
    """The Kafka topics a query reads or writes, for its failure message."""
    if catalog is None or pipeline is None:
        return ""
    parts = []
    datasets = {**query_sources(catalog, pipeline, name)}
    if sink is not None:
        datasets[name] = sink
    for dataset_name, dataset in datasets.items():
        if dataset.file_format != "kafka":
            continue
        options = {**dataset.load_options, **dataset.writer_options}
        topic = next(
            (
                str(options[key])
                for key in ("subscribe", "subscribePattern", "assign", "topic")
                if key in options
            ),
            "a topic column",
        )
        servers = dataset.kafka_client_config.get("bootstrap.servers", "?")
        parts.append(f"'{dataset_name}' is Kafka {topic} at {servers}")
    return f" ({'; '.join(parts)})" if parts else ""
