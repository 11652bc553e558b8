from kedro.pipeline import Pipeline, node, pipeline

from .nodes import parse_trips, split_valid_trips


def create_pipeline(**kwargs) -> Pipeline:
    return pipeline(
        [
            node(parse_trips, "raw_trips", "parsed_trips", name="parse_trips"),
            node(
                split_valid_trips,
                ["parsed_trips", "taxi_zones", "params:validation"],
                ["bronze_trips", "quarantined_trips"],
                name="split_valid_trips",
            ),
        ]
    )
