"""The hourly summary again, kept up to date while each window is open.

The same nodes as ``aggregate``'s summary, in a query of their own: its sink
(``live_borough_summary``, conf/delta) takes every micro-batch's changed rows
(output mode ``update``) and upserts them, so a window's row is there one
trigger after its first trip and final once the watermark passes it.
"""

from kedro.pipeline import Pipeline, node, pipeline

from ..aggregate.nodes import select_valid_trips, summarise_hourly_by_borough


def create_pipeline(**kwargs) -> Pipeline:
    return pipeline(
        [
            node(
                select_valid_trips,
                "bronze_trips",
                "live_valid_trips",
                name="select_live_trips",
            ),
            node(
                summarise_hourly_by_borough,
                ["live_valid_trips", "taxi_zones", "params:summary"],
                "live_borough_summary",
                name="summarise_live_by_borough",
            ),
        ]
    )
