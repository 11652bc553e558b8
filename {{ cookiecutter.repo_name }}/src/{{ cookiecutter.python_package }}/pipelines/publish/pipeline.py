from kedro.pipeline import Pipeline, node, pipeline

from .nodes import summary_messages


def create_pipeline(**kwargs) -> Pipeline:
    return pipeline(
        [
            node(
                summary_messages,
                "hourly_borough_summary",
                "hourly_borough_summary_messages",
                name="summary_messages",
            ),
        ]
    )
