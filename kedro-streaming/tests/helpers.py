"""Catalog entries and run hooks that the plugin's tests build runs from."""

from kedro.framework.hooks.manager import _create_hook_manager
from kedro_streaming import (
    StreamingQueryHooks,
)

DATASET = "kedro_streaming.SparkStreamingDataset"

SOURCE = {
    "type": DATASET,
    "filepath": "in",
    "file_format": "json",
    "load_args": {"schema": "id INT"},
}


def sink(name: str, **save_args) -> dict:
    return {
        "type": DATASET,
        "filepath": name,
        "file_format": "parquet",
        "save_args": {"checkpoint": f"data/checkpoints/{name}", **save_args},
    }


def sink_in(folder, name: str) -> dict:
    """A parquet sink and its checkpoint in ``folder`` (absolute: Spark's
    relative paths start where it started)."""
    return {
        **sink(name),
        "filepath": str(folder / name),
        "save_args": {"checkpoint": str(folder / "checkpoints" / name)},
    }


def kafka(**load_args) -> dict:
    return {"type": DATASET, "file_format": "kafka", "load_args": load_args}


def streaming_hooks(**settings) -> StreamingQueryHooks:
    """The run's hooks, as after a context whose streaming.yml is ``settings``."""
    hooks = StreamingQueryHooks()
    hooks.after_context_created(
        type("Context", (), {"config_loader": {"streaming": settings}})
    )
    return hooks


def registered(hooks: StreamingQueryHooks):
    """A hook manager with ``hooks``, for a runner to drive as Kedro's does."""
    manager = _create_hook_manager()
    manager.register(hooks)
    return manager
