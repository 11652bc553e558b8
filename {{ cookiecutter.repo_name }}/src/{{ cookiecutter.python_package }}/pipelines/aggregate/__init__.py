"""bronze_trips (as a stream) -> hourly_borough_summary."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
