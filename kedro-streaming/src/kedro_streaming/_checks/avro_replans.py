"""Avro schemas and the run's queries: each sink's value schema registered
before any query starts, and a query planned again when it meets a writer
schema id registered while it ran."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kedro.io import DataCatalog
from kedro.io.core import DatasetError
from kedro.pipeline import Pipeline

from kedro_streaming._checks.catalog import query_nodes, query_sources
from kedro_streaming._checks.plans import Plans
from kedro_streaming._connectors.avro.codec import UNPLANNED_ID
from kedro_streaming._connectors.avro.option import writes_avro
from kedro_streaming._dataset import SparkStreamingDataset
from kedro_streaming._spark import whole_text
from kedro_streaming.errors import StreamingConfigError

# The hooks' lines: projects' logging.yml may set this logger's level.
logger = logging.getLogger("kedro_streaming.queries")

# Avro schema versions a run takes in while it runs, before it fails instead.
MAX_REPLANS = 10


def register_avro_values(
    catalog: DataCatalog,
    pipeline: Pipeline,
    sinks: dict[str, SparkStreamingDataset],
    plans: Plans,
) -> None:
    """Registers each Avro sink's value schemas before any query starts, so
    that a version the subject's compatibility refuses fails the run
    first. A sink whose sources have no history yet (a table this run
    writes first) registers when its query starts."""
    for name, dataset in sinks.items():
        if not writes_avro(dataset):
            continue
        # The dry run's DataFrame is the run's, unless it read a stand-in
        # for a sink of this run: then as the run reads that sink.
        frame = plans.frames.get(name) if name not in plans.stand_ins else None
        try:
            frame = frame if frame is not None else rebuild(catalog, pipeline, name)
        except DatasetError:
            continue
        try:
            dataset.connector.encode(dataset, frame)
        except StreamingConfigError as error:
            raise StreamingConfigError(f"'{name}': {error}") from None


def rebuild(catalog: DataCatalog, pipeline: Pipeline, sink: str) -> Any:
    """The sink's DataFrame made again: its query's nodes run on what the
    catalog loads now (a source's refreshed schemas among it)."""
    names = set(query_nodes(catalog, pipeline, sink))
    made: dict[str, Any] = {}
    for node in pipeline.nodes:  # in the order they run
        if node.name in names:
            inputs = {
                name: made[name] if name in made else catalog.load(name)
                for name in node.inputs
            }
            made.update(node.run(inputs))
    return made[sink]


class AvroReplans:
    """A run's queries planned again for Avro schema ids met while it runs."""

    def __init__(self, catalog: DataCatalog | None, pipeline: Pipeline | None):
        self._catalog = catalog
        self._pipeline = pipeline
        self.count = 0

    def replanned(
        self, name: str, error: Exception, restart: Callable[[str, Any], None]
    ) -> bool:
        """Plans a query again when it met an Avro schema id its plan lacks
        (a version registered while it ran): looks the id up, rebuilds the
        query's DataFrame from its sources and ``restart``s it from its
        checkpoint, the failed micro-batch included. At most
        ``MAX_REPLANS`` times a run."""
        found = UNPLANNED_ID.search(whole_text(error))
        sources = {
            source: dataset
            for source, dataset in query_sources(
                self._catalog, self._pipeline, name
            ).items()
            if dataset.avro is not None
        }
        if found is None or not sources or self.count >= MAX_REPLANS:
            return False
        self.count += 1
        schema_id = int(found[1])
        for dataset in sources.values():
            dataset.avro.plan_id(schema_id)
        restart(name, rebuild(self._catalog, self._pipeline, name))
        subjects = ", ".join(f"'{d.avro.schemas.subject}'" for d in sources.values())
        known = any(schema_id in d.avro.schemas.writers for d in sources.values())
        logger.warning(
            "Streaming query '%s' met Avro schema id %d, %s: planned it again "
            "(%d of at most %d replans this run); it resumes from its checkpoint.",
            name,
            schema_id,
            f"registered since it started (subject {subjects})"
            if known
            else "which the registry does not have (those records are quarantined)",
            self.count,
            MAX_REPLANS,
        )
        return True
