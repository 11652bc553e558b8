from kedro.pipeline import Pipeline, node, pipeline
from kedro_streaming import parse_records

from .nodes import check_records, select_rejected_records


def create_pipeline(**kwargs) -> Pipeline:
    return pipeline(
        [
            node(
                parse_records,
                ["raw_records", "params:record_schema"],
                "parsed_records",
                name="parse_records",
            ),
            node(
                check_records,
                ["parsed_records", "params:record_expectations"],
                "checked_records",
                name="check_records",
            ),
            # A query of its own over the checked_records table: the records
            # are read, parsed and checked once.
            node(
                select_rejected_records,
                "checked_records",
                "quarantined_records",
                name="select_rejected_records",
            ),
        ]
    )
