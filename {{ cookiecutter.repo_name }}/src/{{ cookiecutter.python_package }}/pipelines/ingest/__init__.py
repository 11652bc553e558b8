"""Raw trips -> bronze_trips: every record, typed, valid or with its rejection reasons."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
