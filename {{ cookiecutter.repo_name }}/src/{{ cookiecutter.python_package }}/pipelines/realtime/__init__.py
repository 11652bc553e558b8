"""Kafka trips -> checked and joined with their zones -> Kafka, in Real-Time Mode."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
