"""The package's layers import one way: what connects never imports the run
(the session is handed in), and no package reaches up to one above it. Read
from the code's own imports, those inside functions and for type checkers
included."""

from __future__ import annotations

import ast
from pathlib import Path

import kedro_streaming
import pytest

ROOT = Path(kedro_streaming.__file__).parent
# Bottom to top: each may import from its own layer and those below it.
LAYERS = [
    {"errors", "problems", "_spark", "_project", "_checkpoint"},
    {"_connectors"},
    {"_nodes"},
    {"_observe"},
    {"_session"},
    {"_dataset", "_table"},
    {"_checks"},
    {"_run"},
    {"_cli", "testing", "pytest_plugin", "devtools", "__init__"},
]
LEVEL = {part: level for level, parts in enumerate(LAYERS) for part in parts}
MODULES = sorted(ROOT.rglob("*.py"))


def room(path: Path) -> str:
    """The top-level module or package of the plugin a file belongs to."""
    return path.relative_to(ROOT).parts[0].removesuffix(".py")


def imported_rooms(path: Path) -> set[str]:
    """The plugin's rooms a module imports, wherever in it."""
    found = set()
    for each in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(each, ast.ImportFrom):
            if each.level:  # relative: from . or ..
                base = path.relative_to(ROOT).parts[: -each.level]
                names = [".".join(("kedro_streaming", *base, each.module or ""))]
            else:
                names = [each.module or ""]
        elif isinstance(each, ast.Import):
            names = [alias.name for alias in each.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "kedro_streaming" and len(parts) > 1 and parts[1]:
                found.add(parts[1])
    return found


def test_every_room_has_a_layer():
    assert {room(path) for path in MODULES} - set(LEVEL) == set()


@pytest.mark.parametrize(
    "path", MODULES, ids=[str(path.relative_to(ROOT)) for path in MODULES]
)
def test_a_module_imports_nothing_above_its_layer(path):
    above = {
        other
        for other in imported_rooms(path)
        if LEVEL.get(other, -1) > LEVEL[room(path)]
    }
    assert above == set(), f"{path.relative_to(ROOT)} imports {sorted(above)}"
