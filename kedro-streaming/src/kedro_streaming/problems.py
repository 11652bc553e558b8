"""How the plugin says what cannot work: one type for a problem, one "did you mean".

A ``Problem`` is its message (a ``str``, as every check joins them), with
the cause, the fix and a stable ``id`` in the manner of PySpark's error
classes: tests and tools match the id, never the wording.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

# How close a name must be to a known one to be named as meant: difflib's
# default, which takes `checkpiont` for `checkpoint` and not `trigger` for
# `topic`; a typo's, where many other valid names are near (a plugin key among
# Spark's options, an entry among the catalog's, a key among Spark's
# settings): `checkpiont` is 0.9 from `checkpoint`, and no option of Spark's
# formats comes this close to a key of the plugin's.
CLOSE = 0.6
TYPO = 0.8


class Problem(str):
    """A problem found before any query starts: its cause, its fix, its id.

    Example:
        >>> problem = Problem(
        ...     "has `checkpiont` in its save_args",
        ...     did_you_mean("checkpiont", ["checkpoint", "trigger"]),
        ...     id="ENTRY_KEY_MISSPELT",
        ... )
        >>> print(problem)
        has `checkpiont` in its save_args: did you mean `checkpoint`?
        >>> problem.id
        'ENTRY_KEY_MISSPELT'
    """

    cause: str
    fix: str
    id: str

    def __new__(cls, cause: str, fix: str = "", *, id: str) -> Problem:  # noqa: A002
        problem = super().__new__(cls, f"{cause}: {fix}" if fix else cause)
        problem.cause, problem.fix, problem.id = cause, fix, id
        return problem


def closest(
    name: str,
    known: Iterable[str] | Mapping[str, str],
    *,
    many: int = 1,
    cutoff: float = CLOSE,
) -> list[str]:
    """The names of ``known`` close enough to ``name`` to be what was meant,
    closest first; a mapping compares its keys and gives their values (a
    lower-case name and its spelling)."""
    shown = dict(known) if isinstance(known, Mapping) else {k: k for k in known}
    close = difflib.get_close_matches(str(name), list(shown), n=many, cutoff=cutoff)
    return [shown[each] for each in close]


def did_you_mean(
    name: str,
    known: Iterable[str] | Mapping[str, str],
    *,
    many: int = 1,
    cutoff: float = CLOSE,
) -> str:
    """``did you mean `x`?`` for the names of ``known`` closest to ``name``;
    empty when none is close.

    Example:
        >>> did_you_mean("trigers", ["trigger", "topic"])
        'did you mean `trigger`?'
        >>> did_you_mean("trips", ["trips_raw", "trips_in"], many=2)
        'did you mean `trips_in` or `trips_raw`?'
        >>> did_you_mean("zzz", ["trigger"])
        ''
    """
    close = closest(name, known, many=many, cutoff=cutoff)
    return (
        "did you mean " + " or ".join(f"`{each}`" for each in close) + "?"
        if close
        else ""
    )
