"""Dedupe: the checked-trips topics read back, each trip once in a table.

``kedro run --env kafka --pipelines dedupe``: reads what the ``realtime``
pipeline wrote (at least once) and writes ``unique_trips``, a file sink,
exactly once (docs/stateful.md).
"""

from kedro.pipeline import Pipeline, node, pipeline

from .nodes import unique_trips


def create_pipeline(**kwargs) -> Pipeline:
    return pipeline(
        [
            node(
                unique_trips,
                ["checked_trip_messages", "params:dedupe"],
                "unique_trips",
                name="unique_trips",
            ),
        ]
    )
