"""A query in words, for the run's lines: its trigger, what it reads, the
Kafka topics a failure message names."""

from __future__ import annotations

from typing import Any


def ends_by_itself(trigger: dict[str, Any] | None) -> bool:
    """Whether a query with ``trigger`` stops once it has read what is there
    (``availableNow``, ``once``).

    Example:
        >>> ends_by_itself({"availableNow": True}), ends_by_itself({"realTime": "2 minutes"})
        (True, False)
    """
    return next(iter(trigger or {}), None) in ("availableNow", "once")


def describe_trigger(trigger: dict[str, Any]) -> str:
    """What a query's trigger means for the run, in words: the start line says
    it, so that a bounded run that keeps going (a `--params` lost) shows why."""
    kind, value = next(iter(trigger.items()))
    if kind == "availableNow":
        return "trigger availableNow, what is there and then it stops"
    if kind == "processingTime":
        return f"a micro-batch every {value}, until Ctrl-C or SIGTERM"
    if kind == "realTime":
        return f"Real-Time Mode, a checkpoint every {value}, until Ctrl-C or SIGTERM"
    return f"trigger {kind}={value}"


def describe_sources(sources: dict[str, Any]) -> str:
    """What a query reads, for its start line: which environment's
    source a run uses shows there."""
    parts = [
        f"{name} ({entry.connector.describe(entry)})" for name, entry in sources.items()
    ]
    return ", ".join(parts) or "its sources"


def addresses(entries: dict[str, Any]) -> str:
    """Where the data a query reads or writes lives (a Kafka topic and its
    brokers), for its failure message."""
    parts = [
        f"'{name}' is {address}"
        for name, entry in entries.items()
        if (address := entry.connector.address(entry))
    ]
    return f" ({'; '.join(parts)})" if parts else ""
