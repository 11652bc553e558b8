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
- ``KafkaSecurity``, ``SchemaRegistry``, ``avro_framer``, ``avro_reader``:
  a Kafka credentials entry for any client; a schema registry and Avro in
  Confluent's wire format, for a project's producers and consumers.
- ``check_kafka_connector``, ``check_delta_package``, ``delta_package_for``,
  ``local_scala_version``: what ``spark.yml``'s packages must be for a Spark;
  ``move_to_spark``: a project's pins rewritten for another Spark release.
- ``kedro streams ...``: status, validate, state, capture, reset, optimize,
  vacuum, spark-line, and the development services (broker, registry,
  cluster, connect, submit, send, watch; the ``dev`` extra,
  ``kedro_streaming.devtools``).

Only these names (``__all__``), ``kedro_streaming.testing`` and
``kedro_streaming.devtools`` are public: the modules behind them are private.
"""

from __future__ import annotations

import ast

import lazy_loader

__version__ = "0.16.4"


def _stub_names() -> dict[str, list[str]]:
    """The public names and the modules that hold them: the stub's
    ``from .module import name as name`` lines (``__init__.pyi``, which type
    checkers and IDEs read). Read through the package's loader, so that it
    works where Spark's executors import the package from a zip, which
    ``lazy_loader.attach_stub`` (it opens a path) cannot read."""
    stub = __loader__.get_data(__file__.removesuffix(".py") + ".pyi").decode()
    names: dict[str, list[str]] = {}
    for line in ast.parse(stub).body:
        if isinstance(line, ast.ImportFrom) and line.level == 1 and line.module:
            names.setdefault(line.module, []).extend(a.name for a in line.names)
    return names


__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs=_stub_names())
