"""Former home of ``kedro streams``, now :mod:`kedro_streaming._cli`."""

from kedro_streaming._cli import commands  # noqa: F401 (installs from before)
from kedro_streaming._cli.sinks import _described_totals  # noqa: F401 (tests/run)
