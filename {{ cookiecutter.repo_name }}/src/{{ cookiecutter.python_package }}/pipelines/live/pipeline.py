"""The hourly summary again, kept up to date while each window is open, with
the zone table kept live from its changes (the ``zones`` pipeline, included).

Its sink (``live_borough_summary``, conf/delta) takes every micro-batch's
changed rows (output mode ``update``) and upserts them, so a window's row is
there one trigger after its first trip and final once the watermark passes
it. Each trip's borough is its zone's in ``current_zones`` when its
micro-batch runs.
"""

from kedro.pipeline import Pipeline, node, pipeline

from ..aggregate.nodes import select_valid_trips
from ..zones import create_pipeline as zones_pipeline
from .nodes import summarise_hourly_by_current_borough


def create_pipeline(**kwargs) -> Pipeline:
    return zones_pipeline() + pipeline(
        [
            node(
                select_valid_trips,
                "bronze_trips",
                "live_valid_trips",
                name="select_live_trips",
            ),
            node(
                summarise_hourly_by_current_borough,
                ["live_valid_trips", "current_zones@table", "params:summary"],
                "live_borough_summary",
                name="summarise_live_by_borough",
            ),
        ]
    )
