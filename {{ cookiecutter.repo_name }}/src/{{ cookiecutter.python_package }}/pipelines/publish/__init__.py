"""hourly_borough_summary (as a stream) -> Kafka messages, one per row."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
