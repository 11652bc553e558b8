"""Spark's sources and sinks for testing and debugging: the ``rate`` and
``socket`` sources, and the ``console`` and ``memory`` sinks.

A console sink prints each micro-batch in the run's log; a memory sink keeps
what it writes in a table of the driver named after the query (the sink's
name), for ``spark.table(...)`` in ``kedro ipython`` or a test::

    trips_seen:
      type: kedro_streaming.SparkStreamingDataset
      file_format: memory          # or console
      save_args:
        output_mode: append
        checkpoint: data/checkpoints/trips_seen
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kedro_streaming._connectors.base import Connector, Entry, RunEntries
from kedro_streaming.problems import Problem

if TYPE_CHECKING:
    from kedro_streaming._connectors.options import OptionNames

# Each format's options, where Spark lists none to read (the others: not checked).
_OPTIONS = {
    "rate": ("rowsPerSecond", "rampUpTime", "numPartitions"),
    "console": ("numRows", "truncate"),
    "memory": (),
}
# The output modes each sink takes.
_MODES = {"console": ("append", "update", "complete"), "memory": ("append", "complete")}


def _options(file_format: str) -> list[str] | None:
    known = _OPTIONS.get(file_format)
    return None if known is None else list(known)


class Generated(Connector):
    """Spark's ``rate`` and ``socket`` sources: rows made or received, in a
    schema of Spark's."""

    name = "generated"
    formats = ("rate", "socket", "rate-micro-batch")
    takes_schema = False

    def option_names(self, names: OptionNames, direction: str) -> list[str] | None:
        return _options(self.file_format)


class Debugging(Connector):
    """Spark's ``console`` and ``memory`` sinks: what a query writes, in the
    log or in a table of the driver, and nothing else."""

    name = "debugging"
    formats = ("console", "memory")

    def source_problems(self, entry: Entry) -> list[Problem]:
        return [
            Problem(
                f"is a {entry.file_format} sink, which keeps nothing a stream can read",
                "read the table the stream writes instead, or write it to a file "
                "or Delta sink",
                id="DEBUGGING_SINK_READ",
            )
        ]

    def problems(self, run: RunEntries) -> list[str]:
        # A sink of the run read back by another query of the same run: its
        # source problem is not asked (the sink is written first), this is.
        return [
            f"'{name}' {problem}"
            for name in run.readers
            if name in run.sinks and isinstance(run.sinks[name].connector, Debugging)
            for problem in self.source_problems(run.sinks[name])
        ]

    def sink_problems(self, entry: Entry) -> list[Problem]:
        problems = []
        if entry.path:
            problems.append(
                Problem(
                    f"has a filepath, which a {entry.file_format} sink does not "
                    "write to",
                    "remove it",
                    id="DEBUGGING_SINK_WITH_PATH",
                )
            )
        modes, mode = _MODES[entry.file_format], entry.sink.output_mode
        if mode not in modes and mode in _MODES["console"]:  # else: unknown, said
            problems.append(
                Problem(
                    f"has output_mode '{mode}', which a {entry.file_format} sink "
                    "does not support",
                    f"use {' or '.join(modes)}",
                    id="DEBUGGING_SINK_OUTPUT_MODE",
                )
            )
        return problems

    def option_names(self, names: OptionNames, direction: str) -> list[str] | None:
        return _options(self.file_format)
