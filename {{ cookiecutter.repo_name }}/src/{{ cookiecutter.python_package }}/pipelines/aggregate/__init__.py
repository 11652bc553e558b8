"""bronze_trips (as a stream) -> its valid trips -> hourly_borough_summary,
and its rejected records -> quarantined_trips."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
