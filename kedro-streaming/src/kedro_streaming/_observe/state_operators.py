"""A stateful query's state, operator by operator, from Spark's progress
report (``stateOperators``), under names that say what they count."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

# transformWithState's own figures, among Spark's customMetrics. A Python
# processor's fired timers are counted as deleted (Spark 4.1-4.2 leave its
# numExpiredTimers at 0), so both make "removed".
_TIMERS_SET = ("numRegisteredTimers",)
_TIMERS_REMOVED = ("numExpiredTimers", "numDeletedTimers")
_TTL_REMOVED = ("numValuesRemovedDueToTTLExpiry",)


@dataclass(frozen=True)
class StateOperator:
    """One stateful operator after one micro-batch: Spark's ``operatorName``
    (``#2``... for a second of one name), ``numRowsTotal``,
    ``memoryUsedBytes`` (RocksDB: native memory), ``numRowsRemoved``,
    ``numRowsDroppedByWatermark``; and, ``transformWithState``'s only, its
    timers set and fired or deleted, and values whose time to live ran out.

    Example:
        >>> state_operators({"stateOperators": [
        ...     {"operatorName": "symmetricHashJoin", "numRowsTotal": 3,
        ...      "memoryUsedBytes": 2048, "numRowsRemoved": 1}]})
        [StateOperator(name='symmetricHashJoin', rows=3, memory_bytes=2048, rows_removed=1, late_rows_dropped=0, timers_set=None, timers_removed=None, ttl_values_removed=None)]
    """

    name: str
    rows: int
    memory_bytes: int
    rows_removed: int
    late_rows_dropped: int
    timers_set: int | None = None
    timers_removed: int | None = None
    ttl_values_removed: int | None = None

    def as_record(self) -> dict[str, Any]:
        """The operator as a JSON object of the progress log."""
        return {key: value for key, value in asdict(self).items() if value is not None}


def state_operators(report: dict[str, Any]) -> list[StateOperator]:
    """The stateful operators of one progress report, in Spark's order."""
    seen: Counter = Counter()
    found = []
    for state in report.get("stateOperators") or []:
        name = state.get("operatorName") or "stateful"
        seen[name] += 1
        custom = state.get("customMetrics") or {}
        found.append(
            StateOperator(
                name=name if seen[name] == 1 else f"{name}#{seen[name]}",
                rows=int(state.get("numRowsTotal", 0)),
                memory_bytes=int(state.get("memoryUsedBytes", 0)),
                rows_removed=int(state.get("numRowsRemoved", 0)),
                late_rows_dropped=int(state.get("numRowsDroppedByWatermark", 0)),
                timers_set=_custom(custom, _TIMERS_SET),
                timers_removed=_custom(custom, _TIMERS_REMOVED),
                ttl_values_removed=_custom(custom, _TTL_REMOVED),
            )
        )
    return found


def describe_state(operators: list[StateOperator]) -> str:
    """The operators for a progress line: ``symmetricHashJoin 3 rows 2.0 KiB``."""
    return ", ".join(
        f"{op.name} {op.rows} rows {_size(op.memory_bytes)}"
        + (f", timers {op.timers_set} set" if op.timers_set else "")
        + (f", {op.timers_removed} fired or deleted" if op.timers_removed else "")
        + (f", {op.ttl_values_removed} expired" if op.ttl_values_removed else "")
        for op in operators
    )


def _custom(custom: dict[str, Any], names: tuple[str, ...]) -> int | None:
    found = [int(custom[name]) for name in names if name in custom]
    return sum(found) if found else None


def _size(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
