"""TODO"""

from __future__ import annotations


def headline(error: BaseException, limit: int = 1000) -> str:
    """The first line of Spark's message, without the query plan that follows.

    Where that line only introduces its cause (Spark's "Exception thrown in
    awaitResult:"), the cause's first line follows it.
    """
    text, cause = _first_line(error), error
    while text.endswith(":"):
        cause = getattr(cause, "_cause", None) or cause.__cause__
        if cause is None:
            break
        text = f"{text} {_first_line(cause)}"
    return text if len(text) <= limit else text[:limit] + "..."


def _first_line(error: BaseException) -> str:
    # Without control characters: Spark quotes binary files' bytes (a NUL
    # makes grep call a log binary).
    text = "".join(c if c.isprintable() or c == "\n" else " " for c in str(error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
