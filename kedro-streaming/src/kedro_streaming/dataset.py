"""Moved in 0.7.0; this path goes in 0.8.0. Import the public names from
``kedro_streaming`` (``from kedro_streaming import ...``)."""

from ._lazy import moved

__getattr__ = moved(__name__, "kedro_streaming._connectors.dataset")
