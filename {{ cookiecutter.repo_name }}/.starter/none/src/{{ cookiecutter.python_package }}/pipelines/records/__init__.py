"""Records: raw JSON records in, typed and checked records out."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
