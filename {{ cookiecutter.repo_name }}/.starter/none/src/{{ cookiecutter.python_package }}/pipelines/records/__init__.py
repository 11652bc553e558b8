"""Records: raw JSON records in; typed and checked records, and the
quarantine of the rejected ones, out."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
