"""Project pipelines."""

from kedro.pipeline import Pipeline

from .pipelines import aggregate, ingest


def register_pipelines() -> dict[str, Pipeline]:
    """Registers the project's pipelines.

    ``ingest`` writes the ``bronze_trips`` file sink; ``aggregate`` reads it back
    as a stream. The default pipeline runs both; the hooks hold ``aggregate``
    back until ``ingest`` has written history to read.

    Returns:
        A mapping from pipeline names to ``Pipeline`` objects.
    """
    ingest_pipeline = ingest.create_pipeline()
    aggregate_pipeline = aggregate.create_pipeline()
    return {
        "ingest": ingest_pipeline,
        "aggregate": aggregate_pipeline,
        "__default__": ingest_pipeline + aggregate_pipeline,
    }
