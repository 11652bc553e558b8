"""Writes the example data into the new project, so that `kedro run` works at once."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path("src").resolve()))

from {{ cookiecutter.python_package }} import example_data  # noqa: E402

example_data.init()
