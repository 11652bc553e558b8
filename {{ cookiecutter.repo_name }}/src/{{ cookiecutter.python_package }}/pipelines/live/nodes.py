"""Live: the hourly summary with each trip's borough as the zone table has it
now, kept from its changes by the ``zones`` pipeline."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..aggregate.nodes import summarise_hourly


def summarise_hourly_by_current_borough(
    valid_trips: DataFrame, current_zones: DataFrame, summary: dict[str, Any]
) -> DataFrame:
    """``summarise_hourly_by_borough``, each trip's borough that of its
    pickup zone in ``current_zones`` when its micro-batch runs.

    A stream joined with a table reads the table again in every micro-batch:
    a zone's change reaches the trips of the next micro-batch, and a window's
    row keeps the boroughs its trips had when they were counted.

    Args:
        valid_trips: Validated trips, as ``summarise_hourly_by_borough``'s.
        current_zones: The zone table kept from its changes (a Delta table,
            ``LocationID``, ``Borough``); a deleted zone's trips are "Unknown".
        summary: ``window_duration`` and ``watermark_delay``.
    """
    zones = F.broadcast(current_zones.select("LocationID", "Borough"))
    trips = valid_trips.join(
        zones, valid_trips["PULocationID"] == zones["LocationID"], "left"
    )
    return summarise_hourly(trips, F.col("Borough"), summary)
