"""Writes the example data into the new project, so that `kedro run` works at once."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))  # the project root, which holds tools/

from tools import trips  # noqa: E402

trips.init()
