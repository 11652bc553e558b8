from kedro.pipeline import Pipeline, node, pipeline

from .nodes import summarise_hourly_by_borough, summary_messages


def create_pipeline(**kwargs) -> Pipeline:
    return pipeline(
        [
            node(
                summarise_hourly_by_borough,
                ["bronze_trips", "taxi_zones", "params:summary"],
                "hourly_borough_summary",
                name="summarise_hourly_by_borough",
            ),
            node(
                summary_messages,
                ["bronze_trips", "taxi_zones", "params:summary"],
                "hourly_borough_summary_messages",
                name="summary_messages",
            ),
        ]
    )
