"""Project pipelines."""

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline


def register_pipelines() -> dict[str, Pipeline]:
    """Registers the project's pipelines: each folder of ``pipelines/`` with a
    ``create_pipeline``; the default pipeline is all of them.

    Returns:
        A mapping from pipeline names to ``Pipeline`` objects.
    """
    pipelines = find_pipelines()
    pipelines["__default__"] = sum(pipelines.values(), Pipeline([]))
    return pipelines
