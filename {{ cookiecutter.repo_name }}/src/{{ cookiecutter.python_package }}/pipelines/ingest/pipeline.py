from kedro.pipeline import Pipeline, node, pipeline

from .nodes import check_trips, parse_trips


def create_pipeline(**kwargs) -> Pipeline:
    return pipeline(
        [
            node(parse_trips, "raw_trips", "parsed_trips", name="parse_trips"),
            node(
                check_trips,
                ["parsed_trips", "taxi_zones", "params:trip_expectations"],
                "bronze_trips",
                name="check_trips",
            ),
        ]
    )
