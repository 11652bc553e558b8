from kedro.pipeline import Pipeline, node, pipeline

from .nodes import (
    select_rejected_trips,
    select_valid_trips,
    summarise_hourly_by_borough,
)


def create_pipeline(**kwargs) -> Pipeline:
    return pipeline(
        [
            node(
                select_valid_trips,
                "bronze_trips",
                "valid_trips",
                name="select_valid_trips",
            ),
            node(
                select_rejected_trips,
                "bronze_trips",
                "quarantined_trips",
                name="select_rejected_trips",
            ),
            node(
                summarise_hourly_by_borough,
                ["valid_trips", "taxi_zones", "params:summary"],
                "hourly_borough_summary",
                name="summarise_hourly_by_borough",
            ),
        ]
    )
