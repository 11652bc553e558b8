"""Which files a file sink's query wrote in one batch, from the sink's own log
(``<folder>/_spark_metadata``): one file per batch listing the files it
added, every tenth (``N.compact``) listing all of them so far, the older
ones then deleted.

Example:
    >>> files_written("/nowhere/at/all", 3) is None
    True
"""

from __future__ import annotations

import json
import urllib.parse

import fsspec

LOG = "_spark_metadata"


def files_written(folder: str, batch: int) -> list[str] | None:
    """The files batch ``batch`` added to the sink at ``folder``, in order;
    ``None`` when the log no longer says (its entries compacted away)."""
    fs, root = fsspec.core.url_to_fs(folder.rstrip("/"))
    log = f"{root}/{LOG}"
    if not fs.exists(log):
        return None
    names = {entry.rstrip("/").rsplit("/", 1)[-1] for entry in fs.ls(log, detail=False)}
    through = _files_through(fs, log, names, batch)
    before = _files_through(fs, log, names, batch - 1) if batch > 0 else []
    if through is None or before is None:
        return None
    earlier = set(before)
    return [path for path in through if path not in earlier]


def _files_through(fs, log: str, names: set[str], batch: int) -> list[str] | None:
    """Every file the log lists up to ``batch``: the newest compact file at
    or before it, and the batches' own files after that."""
    compacts = [
        int(name.split(".")[0])
        for name in names
        if name.endswith(".compact") and name.split(".")[0].isdigit()
    ]
    base = max((c for c in compacts if c <= batch), default=None)
    first = 0 if base is None else base + 1
    files = [] if base is None else _entries(fs, f"{log}/{base}.compact")
    for each in range(first, batch + 1):
        if str(each) not in names:
            return None  # deleted after a compaction past it
        files += _entries(fs, f"{log}/{each}")
    return files


def _entries(fs, path: str) -> list[str]:
    lines = fs.cat_file(path).decode().splitlines()[1:]  # after "v1"
    # The log keeps URIs (``My%20Streams``): Spark would escape them again.
    return [
        urllib.parse.unquote(entry["path"])
        for entry in map(json.loads, filter(None, lines))
        if entry.get("action", "add") == "add"
    ]
