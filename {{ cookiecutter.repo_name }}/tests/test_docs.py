"""The recipes of docs/: each Python block of a page, run as this module's
tests, so that the code a page shows is the code that passes."""

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def recipe(page: str) -> dict:
    """The page's Python blocks, run in order in one namespace, each at its
    own lines of the page (so that a failure points at the page's line)."""
    text = (DOCS / page).read_text()
    code = "".join(
        "\n" * (text.count("\n", 0, block.start(1)) - code_lines) + block[1]
        for code_lines, block in _blocks(text)
    )
    namespace: dict = {"__name__": f"docs.{page}"}
    exec(compile(code, str(DOCS / page), "exec"), namespace)  # noqa: S102 (our own docs)
    return namespace


def _blocks(text: str):
    """Each block, with the number of lines of code before it."""
    lines = 0
    for block in BLOCK.finditer(text):
        yield lines, block
        lines = text.count("\n", 0, block.end(1))


STATEFUL = recipe("stateful.md")


@pytest.mark.parametrize("test", sorted(n for n in STATEFUL if n.startswith("test_")))
def test_stateful_recipe(test, stream_test):
    STATEFUL[test](stream_test)
