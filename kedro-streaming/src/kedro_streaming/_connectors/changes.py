"""A Delta sink kept from a change feed (``save_args: changes:``): what a
change is (keys, sequence, deletes) and what the table keeps (SCD type 1: the
current rows; type 2: one row per version), read once with its problems."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from kedro_streaming.problems import Problem, did_you_mean

# The column `debezium_changes` writes Debezium's operation in: a default
# delete condition when the changes have it, and not kept in the table.
OPERATION = "_op"
# Type 2's columns: the sequence of the change that opened a version and of
# the one that closed it (null while it is current), as Lakeflow names them.
START_AT, END_AT = "__start_at", "__end_at"
# Beside the table's data, in folders Delta's readers and VACUUM leave alone
# (their names start with `_`): type 1's remembered deletes, type 2's changes.
DELETES_FOLDER, LOG_FOLDER = "_scd_deletes", "_scd_changes"
# Beside a table kept from snapshots: the snapshots applied, one row each.
SNAPSHOTS_FOLDER = "_scd_snapshots"
# What became of a micro-batch's changes (the log line's words) and their
# names as a metric's label: kedro_stream_changes_total{outcome=...}.
CHANGE_OUTCOMES = {
    "inserted": "inserted",
    "updated": "updated",
    "deleted": "deleted",
    "not newer than the table's row": "not_newer_than_row",
    "deletes changing nothing": "delete_changing_nothing",
    "older than a remembered delete": "older_than_remembered_delete",
    "superseded in its micro-batch": "superseded_in_batch",
    "added to the history": "added_to_history",
    "repeated": "repeated",
    "without a key or a sequence": "without_key_or_sequence",
    "unchanged in its snapshot": "unchanged_in_snapshot",
    "in a snapshot not newer than the last applied": "in_older_snapshot",
}
# What a type 2 micro-batch did to versions (kedro_stream_versions_total).
VERSION_CHANGES = ("opened", "closed", "rewritten", "removed")
_outcomes: dict[tuple[str, int], dict[str, dict[str, int]]] = {}
_outcomes_lock = threading.Lock()
_KEPT_UNTAKEN = 1000


def describe_outcomes(changes: dict[str, int], versions: dict[str, int]) -> str:
    """Outcome labels and counts in the log line's words and order, nonzero
    ones (``changes`` and ``versions`` in any order, as totals.json sorts)."""
    said = [
        f"{changes[label]} {words}"
        for words, label in CHANGE_OUTCOMES.items()
        if changes.get(label)
    ]
    return ", ".join(
        said
        + [f"{versions[v]} versions {v}" for v in VERSION_CHANGES if versions.get(v)]
    )


def record_outcomes(query_id: str, batch: int, outcomes: dict[str, dict]) -> None:
    """What one micro-batch did (``changes`` by outcome label, ``versions``),
    for the run's progress record of that batch (``take_outcomes``)."""
    with _outcomes_lock:
        _outcomes[(query_id, batch)] = outcomes
        while len(_outcomes) > _KEPT_UNTAKEN:  # no run took them: the oldest go
            del _outcomes[next(iter(_outcomes))]


def take_outcomes(query_id: str, batch: int) -> dict[str, dict[str, int]] | None:
    """What ``record_outcomes`` kept for the batch, once; ``None`` for a sink
    not kept from changes (or whose micro-batches ran in another process, as
    under Spark Connect: then only its log has them)."""
    with _outcomes_lock:
        return _outcomes.pop((query_id, batch), None)


_KEYS = (
    "keys",
    "sequence",
    "deletes",
    "scd_type",
    "track",
    "columns",
    "deletes_kept_for",
    "from_snapshots",
)
_INTERVAL = re.compile(r"^\s*(\d+)\s*(second|minute|hour|day)s?\s*$")
_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
_FIX = "see docs/cdc.md for each setting"


@dataclass(frozen=True)
class Selection:
    """``all``, a list of columns, or ``{except: [...]}``, over some columns."""

    only: tuple[str, ...] | None = None
    but: tuple[str, ...] = ()

    @classmethod
    def parse(cls, value: Any) -> Selection | None:
        if value in (None, "all"):
            return cls()
        if isinstance(value, str):
            return cls(only=(value,))
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return cls(only=tuple(value))
        if isinstance(value, dict) and set(value) == {"except"}:
            but = value["except"]
            but = [but] if isinstance(but, str) else but
            if isinstance(but, list) and all(isinstance(v, str) for v in but):
                return cls(but=tuple(but))
        return None

    def of(self, columns: list[str]) -> list[str]:
        chosen = list(self.only) if self.only is not None else columns
        return [c for c in chosen if c not in self.but]

    def named(self) -> tuple[str, ...]:
        return (*(self.only or ()), *self.but)


@dataclass(frozen=True)
class Changes:
    """The ``changes`` of a Delta sink's ``save_args``.

    Example:
        >>> spec = Changes.parse({"keys": "id", "sequence": ["lsn"], "scd_type": 2})
        >>> spec.keys, spec.sequence, spec.scd_type, spec.deletes_kept_seconds
        (('id',), ('lsn',), 2, 172800)
    """

    keys: tuple[str, ...]
    sequence: tuple[str, ...]
    deletes: str | None = None
    scd_type: int = 1
    track: Selection = Selection()
    columns: Selection = Selection()
    deletes_kept_seconds: int = 2 * 86400
    from_snapshots: bool = False

    @classmethod
    def parse(cls, value: dict[str, Any]) -> Changes:
        keys, sequence = value.get("keys"), value.get("sequence")
        kept = _INTERVAL.match(str(value.get("deletes_kept_for", "2 days")))
        return cls(
            keys=tuple([keys] if isinstance(keys, str) else keys or ()),
            sequence=tuple([sequence] if isinstance(sequence, str) else sequence or ()),
            deletes=value.get("deletes"),
            scd_type=value.get("scd_type", 1),
            track=Selection.parse(value.get("track")) or Selection(),
            columns=Selection.parse(value.get("columns")) or Selection(),
            deletes_kept_seconds=(
                int(kept[1]) * _SECONDS[kept[2]] if kept else 2 * 86400
            ),
            from_snapshots=value.get("from_snapshots") is True,
        )

    def delete_condition(self, columns: list[str]) -> str:
        """The SQL condition of a delete (``false`` when none is declared and
        the changes have no ``_op``)."""
        if self.deletes:
            return self.deletes
        return f"`{OPERATION}` = 'd'" if OPERATION in columns else "false"

    def kept(self, columns: list[str]) -> list[str]:
        """The table's columns: the keys, the sequence and the chosen others."""
        others = [c for c in columns if c != OPERATION or self.columns.only]
        chosen = self.columns.of(others)
        own = [*self.keys, *self.sequence]
        return own + [c for c in chosen if c not in own]

    def tracked(self, columns: list[str]) -> list[str]:
        """Type 2: the kept columns whose change makes a new version."""
        kept = [c for c in self.kept(columns) if c not in (*self.keys, *self.sequence)]
        return [c for c in self.track.of(kept) if c in kept]


def changes_problems(value: Any) -> list[Problem]:
    """What keeps a sink's ``changes`` from being read, from conf/ alone."""
    if not isinstance(value, dict):
        return [_problem("that are not a mapping of settings", "CHANGES_NOT_A_MAPPING")]
    problems = [
        _problem(
            f"with `{key}`, which is not one of its settings",
            "CHANGES_KEY_UNKNOWN",
            did_you_mean(key, _KEYS) or f"use {', '.join(_KEYS)}",
        )
        for key in value
        if key not in _KEYS
    ]
    for key in ("keys", "sequence"):
        given = value.get(key)
        if not given or not (
            isinstance(given, str)
            or isinstance(given, list)
            and all(isinstance(v, str) and v for v in given)
        ):
            what = "identify a row" if key == "keys" else "order the changes of a key"
            problems.append(
                _problem(
                    f"with no `{key}`: the columns that {what}",
                    f"CHANGES_WITHOUT_{key.upper()}",
                    f"name them, e.g. `{key}: [{'id' if key == 'keys' else 'lsn'}]`",
                )
            )
    if value.get("scd_type", 1) not in (1, 2):
        problems.append(
            _problem(
                f"with scd_type {value['scd_type']!r}",
                "CHANGES_SCD_TYPE_UNKNOWN",
                "use 1 (the current rows) or 2 (one row per version)",
            )
        )
    for key in ("track", "columns"):
        if key in value and Selection.parse(value[key]) is None:
            problems.append(
                _problem(
                    f"with {key} {value[key]!r}",
                    f"CHANGES_{key.upper()}_NOT_A_SELECTION",
                    f"use `{key}: all`, a list of columns, or `{key}: {{except: [...]}}`",
                )
            )
    if "track" in value and value.get("scd_type", 1) != 2:
        problems.append(
            _problem(
                "with `track`, which only type 2 reads",
                "CHANGES_TRACK_WITHOUT_TYPE_2",
                "add `scd_type: 2`, or remove `track`",
            )
        )
    if "deletes_kept_for" in value and not _INTERVAL.match(
        str(value["deletes_kept_for"])
    ):
        problems.append(
            _problem(
                f"with deletes_kept_for {value['deletes_kept_for']!r}",
                "CHANGES_DELETES_KEPT_FOR_NOT_AN_INTERVAL",
                "give a number of seconds, minutes, hours or days, e.g. `2 days`",
            )
        )
    return problems + _snapshot_problems(value)


def _snapshot_problems(value: dict[str, Any]) -> list[Problem]:
    snapshots = value.get("from_snapshots", False)
    if snapshots not in (True, False):
        return [
            _problem(
                f"with from_snapshots {snapshots!r}",
                "CHANGES_FROM_SNAPSHOTS_NOT_A_BOOLEAN",
                "use `from_snapshots: true` (each micro-batch holds whole "
                "snapshots) or leave it out",
            )
        ]
    if not snapshots:
        return []
    problems = [
        _problem(
            f"with `{key}` and from_snapshots: a key missing from a snapshot is "
            "its delete, and an older snapshot is never applied",
            "CHANGES_SNAPSHOTS_WITH_DELETES",
            f"remove `{key}`",
        )
        for key in ("deletes", "deletes_kept_for")
        if key in value
    ]
    sequence = value.get("sequence")
    if isinstance(sequence, list) and len(sequence) > 1:
        problems.append(
            _problem(
                "from snapshots with a sequence of several columns",
                "CHANGES_SNAPSHOTS_SEQUENCE",
                "name the one column that orders the snapshots (e.g. the "
                "snapshot's date), `sequence: snapshot_at`",
            )
        )
    return problems


def column_problems(spec: Changes, columns: list[str]) -> list[Problem]:
    """What the node's columns lack for ``spec`` (checked before start)."""
    named = {
        "keys": spec.keys,
        "sequence": spec.sequence,
        "columns": spec.columns.named(),
        "track": spec.track.named(),
    }
    problems = [
        _problem(
            f"with {setting} `{name}`, which the node's output does not have",
            "CHANGES_COLUMN_MISSING",
            did_you_mean(name, columns)
            or f"name one of its columns: {', '.join(columns)}",
        )
        for setting, names in named.items()
        for name in names
        if name not in columns
    ]
    if spec.scd_type == 2 and not problems and not spec.tracked(columns):
        problems.append(
            _problem(
                "that track no column, so no change would make a new version",
                "CHANGES_TRACK_NOTHING",
                "track at least one kept column other than the keys and sequence",
            )
        )
    clash = [c for c in (START_AT, END_AT) if c in columns]
    if spec.scd_type == 2 and clash:
        problems.append(
            _problem(
                f"into a column named `{clash[0]}`, which type 2 writes itself",
                "CHANGES_COLUMN_RESERVED",
                "rename it in the node",
            )
        )
    return problems


def _problem(cause: str, id: str, fix: str = _FIX) -> Problem:
    return Problem(f"has changes {cause}", fix, id=id)
