"""The zone table kept from its changes, as the database has it now
(``current_zones``, type 1) and with every version (``zone_history``, type
2): two queries over the same events, each with its checkpoint (conf/delta).

``current_zones@changes`` and ``current_zones@table`` are one table, written
and read (Kedro's transcoding): a node reading the table runs after the one
keeping it, and the run holds its query back until the table has the
changes there are.
"""

from kedro.pipeline import Pipeline, node, pipeline

from .nodes import applicable_zone_changes, refused_zone_changes


def create_pipeline(**kwargs) -> Pipeline:
    return pipeline(
        [
            node(
                applicable_zone_changes,
                "zone_changes",
                "current_zones@changes",
                name="keep_current_zones",
            ),
            node(
                applicable_zone_changes,
                "zone_changes",
                "zone_history",
                name="keep_zone_history",
            ),
            node(
                refused_zone_changes,
                "zone_changes",
                "refused_zone_changes",
                name="refuse_zone_changes",
            ),
        ]
    )
