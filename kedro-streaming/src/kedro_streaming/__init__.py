"""kedro-streaming: Spark Structured Streaming for Kedro projects.

A project's ``settings.py`` registers the hooks, its catalog names the
datasets, and its nodes may call ``check_expectations``:

- ``SparkStreamingDataset``: a streaming source or sink as a catalog entry
  (``type: kedro_streaming.SparkStreamingDataset``). ``save()`` starts a
  query; ``start(data, trigger=..., query_name=...)`` is the same with the
  caller's trigger and name.
- ``SparkDataset``: kedro-datasets' ``spark.SparkDataset`` on the same session.
- ``SparkHooks``: reads ``spark.yml``; the session starts with the first
  pipeline run or dataset load (``spark_session()``), never for
  ``kedro catalog``, ``kedro registry`` or ``kedro viz``.
- ``StreamingQueryHooks``: checks a run before any query starts, starts each
  sink's query with the run's trigger, holds a stream over a sink back until
  the sink has history, logs one progress line per micro-batch, serves
  Prometheus metrics, stops the queries on Ctrl-C or SIGTERM and fails the
  run when a query fails.
- ``parse_records``: raw records (JSON lines, Kafka values, CSV or parquet
  columns) typed by a schema, each problem named per field, with the raw
  payload and where each record came from.
- ``check_expectations``: data-quality rules declared in configuration
  (warn, quarantine or fail), checked on every record and counted per rule
  in every micro-batch.
- ``Lookup``: a small static table (zones, currencies) as expressions, its
  rows found by key without a join, so no broadcast job per micro-batch.
- ``kafka_producer``, ``kafka_consumer``: kafka-python clients for a
  project's own code, with the brokers and credentials its pipelines use.
- ``testing.StreamTest``: a node or pipeline run on chosen micro-batches
  (the ``stream_test`` pytest fixture of this distribution).
- ``kedro streams ...``: status, validate, reset, optimize, vacuum, and the
  development services (broker, cluster, connect, submit).
"""

from __future__ import annotations

import importlib
from typing import Any

from .console import quiet_resolver_deprecation

__version__ = "0.6.0"

quiet_resolver_deprecation()

# Imported on first use: `kedro catalog`, `kedro viz` and the commands that
# start no Spark do not pay for PySpark's import.
_EXPORTS = {
    "SparkDataset": "dataset",
    "SparkStreamingDataset": "dataset",
    "StreamingConfigError": "errors",
    "StreamingQueryFailed": "errors",
    "Lookup": "lookup",
    "check_expectations": "expectations",
    "kafka_consumer": "clients",
    "kafka_producer": "clients",
    "parse_records": "records",
    "record_origin": "records",
    "StreamingQueryHooks": "queries",
    "SparkHooks": "session",
    "spark_session": "session",
}

__all__ = [
    "Lookup",
    "SparkDataset",
    "SparkHooks",
    "SparkStreamingDataset",
    "StreamingConfigError",
    "StreamingQueryFailed",
    "StreamingQueryHooks",
    "__version__",
    "check_expectations",
    "kafka_consumer",
    "kafka_producer",
    "parse_records",
    "record_origin",
    "spark_session",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kedro_streaming' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


def __dir__() -> list[str]:
    return __all__
