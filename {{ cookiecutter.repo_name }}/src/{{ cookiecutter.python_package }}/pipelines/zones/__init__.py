"""zone_changes (Debezium's events, as a stream) -> current_zones (type 1),
zone_history (type 2) and refused_zone_changes."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
