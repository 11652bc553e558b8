"""Checked trips read back from Kafka -> each trip once, in a table."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
