"""Zones: the zone table's change events in; the changes that can be applied,
and the events that cannot, out (docs/cdc.md)."""

from __future__ import annotations

from kedro_streaming import PROVENANCE_COLUMNS, debezium_changes
from pyspark.sql import DataFrame

# The zone table's columns; the key NOT NULL (an event without it is refused).
ZONE = "LocationID INT NOT NULL, Borough STRING, Zone STRING, service_zone STRING"
# Where each change stands in the database's log: Debezium's `source.lsn`.
SEQUENCE = "source.lsn BIGINT"


def applicable_zone_changes(zone_changes: DataFrame) -> DataFrame:
    """The changes a table can keep: the zone's columns, ``_op`` and ``_lsn``.

    Returns:
        One row per change event; the Delta sinks' ``changes:`` say which
        column is the key, which the sequence, and which type each keeps.
    """
    changes = debezium_changes(zone_changes, ZONE, sequence=SEQUENCE)
    return changes.where("problems IS NULL").drop(
        *PROVENANCE_COLUMNS, "raw_payload", "problems"
    )


def refused_zone_changes(zone_changes: DataFrame) -> DataFrame:
    """The events no table can keep, each with its reason in ``problems`` (a
    tombstone, no key, no sequence, an event that does not parse)."""
    return debezium_changes(zone_changes, ZONE, sequence=SEQUENCE).where(
        "problems IS NOT NULL"
    )
