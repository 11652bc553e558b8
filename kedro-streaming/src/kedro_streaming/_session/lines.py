"""The Spark lines a project runs on, and a project moved to another one.

Every pin that names a project's Spark is rewritten together, as `kedro new`
writes them for that line: ``pyspark`` in ``requirements.txt`` and
``pyproject.toml``, Spark's own packages (the Kafka connector, Avro) and the
Delta package in each environment's ``spark*.yml``, and the checkpoint file
manager's class, whose package moved in Spark 4.1. Text is replaced where it
names the old version, so comments and the user's other settings stay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kedro_streaming._connectors.delta import (
    delta_package_for,
    spark_line,
    version_key,
)
from kedro_streaming.errors import StreamingConfigError

# The lines this version of the plugin is tested on.
LINES = ("4.0", "4.1", "4.2")
_RELEASE = re.compile(r"\d+\.\d+\.\d+")
_PIN = re.compile(
    r"(?P<name>pyspark(?:\[[\w,\s-]*\])?\s*==\s*)(?P<version>[^\s\"',;#()]+)"
)
_DELTA = re.compile(
    r"io\.delta:delta-spark(?:_\d+\.\d+)?_(?P<scala>\d+\.\d+):[^:,\s\"']+"
)
# The checkpoint file managers: in org.apache.spark.sql.execution.streaming
# up to 4.0, in its checkpointing package from 4.1.
_MANAGER = re.compile(
    r"org\.apache\.spark\.sql\.execution\.streaming\.(?:checkpointing\.)?"
    r"(?P<name>FileSystemBased|FileContextBased)CheckpointFileManager"
)
_PROJECT_FILES = ("requirements.txt", "pyproject.toml")


@dataclass(frozen=True)
class Change:
    """One text of one file rewritten (``path`` relative to the project)."""

    path: str
    old: str
    new: str

    def __str__(self) -> str:
        return f"{self.path}: {self.old} -> {self.new}"


def project_spark(root: Path) -> str:
    """The Spark release a project pins (``pyspark==`` of its requirements)."""
    for name in _PROJECT_FILES:
        path = root / name
        found = _PIN.search(path.read_text()) if path.is_file() else None
        if found:
            return found["version"]
    raise StreamingConfigError(
        f"{root} pins no pyspark (pyspark==<version> in requirements.txt or "
        "pyproject.toml), so its Spark line is unknown. Fix: pin the release "
        "the project runs on there, then move it."
    )


def move_to_spark(root: Path, version: str, *, older: bool = False) -> list[Change]:
    """Rewrites the project at ``root`` for Spark ``version``; returns what
    changed. Refuses a release of a line the plugin is not tested on, and,
    unless ``older``, one older than the project's.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from kedro_streaming import move_to_spark
        >>> root = Path(tempfile.mkdtemp())
        >>> _ = (root / "requirements.txt").write_text("pyspark==4.0.0\\n")
        >>> for change in move_to_spark(root, "4.1.1"):
        ...     print(change)
        requirements.txt: pyspark==4.0.0 -> pyspark==4.1.1
    """
    if not _RELEASE.fullmatch(version) or spark_line(version) not in LINES:
        raise StreamingConfigError(
            f"Spark {version} is not a release of a line this kedro-streaming is "
            f"tested on. Fix: choose a release of Spark {', '.join(LINES)} "
            "(e.g. 4.2.0)."
        )
    current = project_spark(root)
    if current == version:
        return []
    if version_key(version) < version_key(current) and not older:
        raise StreamingConfigError(
            f"Spark {version} is older than the project's {current}, and Spark "
            "does not promise that an older release reads the checkpoints and "
            "state a newer one wrote. Fix: to go back, restore the checkpoints "
            "copied before the move up and pass --older, or reset the queries "
            "after (kedro streams reset)."
        )
    changes: list[Change] = []
    for path in _pinned_files(root):
        text = path.read_text()
        new_text, found = _rewrite(text, current, version)
        if new_text != text:
            path.write_text(new_text)
            relative = path.relative_to(root).as_posix()
            changes += [Change(relative, old, new) for old, new in found]
    return changes


def _pinned_files(root: Path) -> list[Path]:
    files = [root / name for name in _PROJECT_FILES if (root / name).is_file()]
    conf = root / "conf"
    return files + sorted(conf.glob("**/spark*.yml")) if conf.is_dir() else files


def _rewrite(text: str, current: str, version: str) -> tuple[str, list[tuple]]:
    """``text`` with each pin of Spark ``current`` made ``version``'s, and
    the pairs (old, new) it replaced."""
    found: list[tuple[str, str]] = []

    def replace(match: re.Match, new: str) -> str:
        if match[0] != new:
            found.append((match[0], new))
        return new

    def pin(match: re.Match) -> str:
        if match["version"] != current:
            return match[0]
        return replace(match, match["name"] + version)

    def spark_package(match: re.Match) -> str:
        return replace(match, f"{match['artifact']}:{version}")

    def delta(match: re.Match) -> str:
        return replace(match, delta_package_for(version, match["scala"]) or match[0])

    def manager(match: re.Match) -> str:
        package = "" if spark_line(version) == "4.0" else "checkpointing."
        name = f"{match['name']}CheckpointFileManager"
        return replace(
            match, f"org.apache.spark.sql.execution.streaming.{package}{name}"
        )

    text = _PIN.sub(pin, text)
    own = re.compile(
        r"(?P<artifact>org\.apache\.spark:spark-[\w.-]+_\d+\.\d+):"
        + re.escape(current)
        + r"(?![\w.-])"
    )
    text = own.sub(spark_package, text)
    text = _DELTA.sub(delta, text)
    return _MANAGER.sub(manager, text), found
