"""A database table's life as Debezium would tell it, from a CSV of its rows:
a snapshot first (``op: r``), then rounds of updates, deletes, creates and
creates again, with what feeds do to them: copies (delivered again) and late
events (delivered a round late). One file of JSON lines per round, and the
table as it is after every change, to check what keeps it.

Example:
    >>> import csv, io, json, tempfile
    >>> from pathlib import Path
    >>> from kedro_streaming.devtools.feed import write_feed
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "zones.csv").write_text("id,name\\n1,Alphabet City\\n2,Astoria\\n")
    >>> final = write_feed(folder / "zones.csv", ["id"], folder / "feed", rounds=2)
    >>> first = json.loads((folder / "feed" / "0000.json").read_text().splitlines()[0])
    >>> first["op"], first["after"], first["source"]["lsn"]
    ('r', {'id': 1, 'name': 'Alphabet City'}, 1)
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any


def write_feed(  # noqa: PLR0913 (the feed's shape, each named)
    table: Path,
    keys: list[str],
    folder: Path,
    *,
    rounds: int = 5,
    changes: int = 0,
    copies: float = 0.05,
    late: float = 0.05,
    seed: int = 7,
) -> list[dict[str, Any]]:
    """Writes ``folder/0000.json`` (the snapshot) and one file per round of
    ``changes`` changes (a tenth of the rows when 0); returns the rows after
    the last change, in key order: what a table kept from the feed holds."""
    rows = _typed(table)
    missing = [k for k in keys if rows and k not in rows[0]]
    if missing:
        raise ValueError(
            f"{table} has no column {missing[0]!r}: name a key among "
            f"{', '.join(rows[0]) if rows else 'its columns'}"
        )
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    feed = _Feed(table.stem, rows, keys)
    rounds_of = [[feed.event("r", None, row) for row in rows]]
    for _ in range(rounds):
        rounds_of.append(
            [feed.change(rng) for _ in range(changes or max(1, len(rows) // 10))]
        )
    delivered: list[list[dict]] = [[] for _ in rounds_of]
    for number, events in enumerate(rounds_of):
        for event in events:
            later = number and number + 1 < len(rounds_of) and rng.random() < late
            delivered[number + 1 if later else number].append(event)
            if number and rng.random() < copies:
                delivered[min(number + 1, len(rounds_of) - 1)].append(event)
    for number, events in enumerate(delivered):
        lines = "".join(json.dumps(e, default=str) + "\n" for e in events)
        (folder / f"{number:04d}.json").write_text(lines)
    return [feed.state[k] for k in sorted(feed.state)]


class _Feed:
    """The table's rows as they change, and Debezium's envelope of each
    change, each event with the next log sequence number."""

    def __init__(self, table: str, rows: list[dict], keys: list[str]) -> None:
        self.table, self.lsn, self.rows, self.keys = table, 0, rows, keys
        self.state = {_key(row, keys): row for row in rows}
        self.gone: dict[tuple, dict[str, Any]] = {}

    def event(self, op: str, before: dict | None, after: dict | None) -> dict:
        self.lsn += 1
        return {
            "before": before,
            "after": after,
            "source": {
                "connector": "postgresql",
                "db": "shop",
                "table": self.table,
                "lsn": self.lsn,
                "ts_ms": 1_700_000_000_000 + self.lsn,
            },
            "op": op,
            "ts_ms": 1_700_000_000_000 + self.lsn,
        }

    def change(self, rng: random.Random) -> dict:
        """One change: mostly an update of a column to another of its values;
        else a delete, a new row, or a deleted row created again."""
        state, gone, keys, rows = self.state, self.gone, self.keys, self.rows
        roll = rng.random()
        if state and roll < 0.7:
            key = rng.choice(sorted(state))
            before = state[key]
            column = rng.choice([c for c in before if c not in keys] or list(before))
            others = [r[column] for r in rows if r[column] != before[column]]
            after = {**before, column: rng.choice(others) if others else before[column]}
            state[key] = after
            return self.event("u", before, after)
        if state and roll < 0.85:
            key = rng.choice(sorted(state))
            gone[key] = state.pop(key)
            return self.event("d", gone[key], None)
        if gone and roll < 0.92:
            key = rng.choice(sorted(gone))
            state[key] = gone.pop(key)
            return self.event("c", None, state[key])
        row = dict(rng.choice(rows))
        for k in keys:  # a key no row has had
            taken = {r[k] for r in [*state.values(), *gone.values(), *rows]}
            row[k] = _fresh(row[k], taken)
        state[_key(row, keys)] = row
        return self.event("c", None, row)


def _fresh(value: Any, taken: set) -> Any:
    if isinstance(value, int):
        return max(v for v in taken if isinstance(v, int)) + 1
    number = 1
    while f"{value}-{number}" in taken:
        number += 1
    return f"{value}-{number}"


def _key(row: dict, keys: list[str]) -> tuple:
    return tuple(row[k] for k in keys)


def _typed(table: Path) -> list[dict[str, Any]]:
    """The CSV's rows, a column of whole numbers as int, of numbers as float."""
    with table.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for column in rows[0] if rows else []:
        for kind in (int, float):
            try:
                values = [kind(r[column]) if r[column] != "" else None for r in rows]
            except ValueError:
                continue
            for row, value in zip(rows, values, strict=True):
                row[column] = value
            break
        else:
            for row in rows:
                row[column] = row[column] if row[column] != "" else None
    return rows
