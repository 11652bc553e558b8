"""bronze_trips (as a stream) and the zone table kept from its changes ->
live_borough_summary, updated while windows are open."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
