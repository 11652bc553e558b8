"""Raw trips -> bronze_trips (valid) and quarantined_trips (rejected)."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
