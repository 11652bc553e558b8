"""Realtime: the ingest pipeline's checks on each trip, out to Kafka at once.

``parse_trips`` and ``check_trips`` (the same declared expectations as
``ingest``), then ``trip_messages``: one query from the trips topic to the
checked-trips topics, run in Spark's Real-Time Mode by its sink's trigger
(``trip_messages`` in conf/kafka/catalog.yml). Nothing in it keeps state, which
Real-Time Mode needs before Spark 4.3.
"""

from kedro.pipeline import Pipeline, node, pipeline

from ..ingest import create_pipeline as create_ingest_pipeline
from .nodes import trip_messages


def create_pipeline(**kwargs) -> Pipeline:
    # The ingest nodes under their own names (realtime.parse_trips...), so
    # that both pipelines can run in one `kedro run`.
    checks = pipeline(
        create_ingest_pipeline(),
        namespace="realtime",
        inputs={"raw_trips": "realtime_raw_trips", "taxi_zones": "taxi_zones"},
        parameters={"params:trip_expectations"},
        outputs={"bronze_trips": "checked_trips"},
    )
    return checks + pipeline(
        [
            node(
                trip_messages,
                ["checked_trips", "taxi_zones", "params:trip_topics"],
                "trip_messages",
                name="trip_messages",
            ),
        ]
    )
