"""A query's checkpoint as Spark lays it out, read without Spark: its batches,
the offsets of each (``v1``: one line per source, in the plan's order;
``v2``: ``name:offset``, the sources named), the stateful operators it keeps
state for, and the plugin's own record of the query that last started on it.

Example:
    >>> checkpoint = Checkpoint("/nowhere/at/all")
    >>> checkpoint.committed is None, checkpoint.last_offsets() is None
    (True, True)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import fsspec

# The plugin's record of the query that last started on a checkpoint, beside
# Spark's own files (Spark reads only the folders and files it writes).
RECORD = "kedro-streaming.json"


@dataclass(frozen=True)
class Offsets:
    """One batch's line in ``offsets/``: Spark's metadata (``batchWatermarkMs``,
    ``conf``, ...) and each source's offset, named in a ``v2`` log."""

    batch: int
    version: int
    metadata: dict[str, Any] = field(default_factory=dict)
    sources: list[tuple[str | None, Any]] = field(default_factory=list)

    @property
    def named(self) -> bool:
        """Whether the log names its sources (Spark 4.2's source evolution)."""
        return self.version >= 2  # noqa: PLR2004 (the log's format version)


class Checkpoint:
    """A checkpoint folder, local or remote (any fsspec URL)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._fs, self._root = fsspec.core.url_to_fs(location.rstrip("/"))

    def exists(self) -> bool:
        return self._fs.exists(self._root)

    def batches(self, folder: str) -> list[int]:
        """The batch ids of ``offsets`` or ``commits``, in order."""
        return self._numbered(folder)

    def _numbered(self, folder: str) -> list[int]:
        """The numbers that name entries of ``folder`` (Spark's batches,
        operators, partitions), in order; ``[]`` without the folder."""
        path = f"{self._root}/{folder}"
        if not self._fs.exists(path):
            return []
        names = [
            entry.rstrip("/").rsplit("/", 1)[-1]
            for entry in self._fs.ls(path, detail=False)
        ]
        return sorted(int(name) for name in names if name.isdigit())

    @property
    def committed(self) -> int | None:
        """The last batch the query committed, if any."""
        commits = self.batches("commits")
        return commits[-1] if commits else None

    def committed_at(self, batch: int) -> datetime | None:
        """When batch ``batch`` was committed (its commit file's time)."""
        info = self._fs.info(f"{self._root}/commits/{batch}")
        moment = info.get("mtime") or info.get("LastModified")
        if isinstance(moment, int | float):
            return datetime.fromtimestamp(moment, timezone.utc)
        return moment

    def offsets(self, batch: int) -> Offsets:
        """Batch ``batch``'s offsets."""
        text = self._fs.cat_file(f"{self._root}/offsets/{batch}").decode()
        lines = text.splitlines()
        version = int(lines[0].lstrip("v")) if lines and lines[0][1:].isdigit() else 1
        metadata = json.loads(lines[1]) if len(lines) > 1 else {}
        sources: list[tuple[str | None, Any]] = []
        for line in lines[2:]:
            name, offset = None, line
            if version >= 2 and ":" in line:  # noqa: PLR2004 (named lines)
                name, offset = line.split(":", 1)
            sources.append((name, None if offset in ("", "-") else _json(offset)))
        return Offsets(batch, version, metadata, sources)

    def last_offsets(self) -> Offsets | None:
        """The newest batch's offsets (committed or not), if any."""
        batches = self.batches("offsets")
        return self.offsets(batches[-1]) if batches else None

    def state_operators(self) -> list[int]:
        """The ids of the stateful operators ``state/`` has a folder for."""
        return self._numbered("state")

    def state_partitions(self, operator: int = 0) -> int:
        """How many partitions the operator's state is split in (its folders)."""
        return len(self._numbered(f"state/{operator}"))

    def query_id(self) -> str | None:
        """The query's id (``metadata``): the same through its restarts."""
        path = f"{self._root}/metadata"
        if not self._fs.exists(path):
            return None
        return _json(self._fs.cat_file(path).decode().strip()).get("id")

    def text(self, relative: str) -> str:
        """The text of one of its files (``offsets/3``, ``commits/2``)."""
        return self._fs.cat_file(f"{self._root}/{relative}").decode()

    def files(self, relative: str) -> list[str]:
        """The files under one of its folders, relative to that folder; ``[]``
        without it."""
        path = f"{self._root}/{relative}".rstrip("/")
        if not self._fs.exists(path):
            return []
        return sorted(
            found.removeprefix(path).lstrip("/")
            for found in self._fs.find(path)
            if not found.rsplit("/", 1)[-1].startswith(".")  # Hadoop's .crc files
        )

    def copy(self, relative: str, to: Path, keep: Callable[[str], bool]) -> int:
        """Copies the files under ``relative`` that ``keep`` takes (by their
        path under it) into the local folder ``to``; how many."""
        kept = [name for name in self.files(relative) if keep(name)]
        for name in kept:
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            self._fs.get_file(f"{self._root}/{relative}/{name}", str(to / name))
        return len(kept)

    def record(self) -> dict[str, Any] | None:
        """The plugin's record of the query that last started here, if any."""
        path = f"{self._root}/{RECORD}"
        if not self._fs.exists(path):
            return None
        try:
            return json.loads(self._fs.cat_file(path))
        except ValueError:  # cut short by a kill while written: none
            return None

    def write_record(self, content: dict[str, Any]) -> None:
        """Replaces the record (the folder is made if Spark has not yet)."""
        self._fs.makedirs(self._root, exist_ok=True)
        self._fs.pipe_file(
            f"{self._root}/{RECORD}", json.dumps(content, indent=1).encode()
        )


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:  # a source's own offset format: kept as it is
        return text
