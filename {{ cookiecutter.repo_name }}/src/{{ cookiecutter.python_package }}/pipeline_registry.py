"""Project pipelines."""

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline


def register_pipelines() -> dict[str, Pipeline]:
    """Registers the project's pipelines.

    ``ingest`` writes the ``bronze_trips`` file sink; ``aggregate`` reads it back
    as a stream and writes ``hourly_borough_summary``; ``publish`` reads that
    as a stream and sends it to Kafka (``--env kafka``); ``realtime`` checks
    each Kafka trip and sends it on in Real-Time Mode (``--env kafka``,
    Spark 4.1+); ``dedupe`` reads those messages back and keeps each trip
    once (``--env kafka``). The default pipeline
    is ``ingest`` and ``aggregate``; the hooks hold a reader back until the
    table it reads has history.

    Returns:
        A mapping from pipeline names to ``Pipeline`` objects.
    """
    pipelines = find_pipelines()
    # Kedro finds only the pipelines a run asks for; all when it asks for the default.
    if "__default__" in pipelines:
        pipelines["__default__"] = pipelines["ingest"] + pipelines["aggregate"]
    return pipelines
