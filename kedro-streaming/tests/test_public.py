"""The public names: one mapping (``__init__.pyi``) that type checkers read
and ``import kedro_streaming`` serves lazily, without importing PySpark."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import zipfile
from pathlib import Path

import kedro_streaming
import pytest

STUB = Path(kedro_streaming.__file__).with_suffix(".pyi")


def stub_imports() -> dict[str, str]:
    """Each name the stub re-exports, and the module it comes from."""
    return {
        alias.asname or alias.name: f"kedro_streaming.{node.module}"
        for node in ast.parse(STUB.read_text()).body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def stub_all() -> list[str]:
    (names,) = (
        ast.literal_eval(node.value)
        for node in ast.parse(STUB.read_text()).body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__"
    )
    return names


def test_the_stub_the_lazy_names_and_all_agree():
    assert sorted(stub_imports()) == sorted(stub_all()) == kedro_streaming.__all__
    assert dir(kedro_streaming) == kedro_streaming.__all__


@pytest.mark.parametrize(
    ("name", "module"),
    [pytest.param(name, module, id=name) for name, module in stub_imports().items()],
)
def test_each_name_is_the_one_its_module_holds(name, module):
    assert getattr(kedro_streaming, name) is getattr(
        importlib.import_module(module), name
    )


def test_importing_the_package_imports_no_spark():
    script = (
        "import sys, kedro_streaming; "
        "assert 'pyspark' not in sys.modules, 'pyspark imported'; "
        "print(kedro_streaming.__version__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == kedro_streaming.__version__


def test_the_package_imports_from_a_zip_as_spark_executors_do(tmp_path):
    """Spark's executors import the package from the zip the session sends
    them (``addPyFile``): its public names are read from there too."""
    root = Path(kedro_streaming.__file__).parent
    archive = tmp_path / "kedro_streaming.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in root.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                zipped.write(path, Path("kedro_streaming") / path.relative_to(root))
    script = (
        f"import sys; sys.path.insert(0, {str(archive)!r}); import kedro_streaming; "
        "from kedro_streaming import KafkaSecurity; "
        "print(kedro_streaming.__file__, len(kedro_streaming.__all__))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        str(archive / "kedro_streaming" / "__init__.py"),
        str(len(kedro_streaming.__all__)),
    ]


# A user's module, as mypy sees it: every public name imported, two of them
# used with their types.
USER_CODE = f"""
from kedro_streaming import {", ".join(kedro_streaming.__all__)}

dataset: SparkStreamingDataset = SparkStreamingDataset(
    filepath="x", file_format="parquet"
)
security = KafkaSecurity({{"security_protocol": "SASL_SSL"}})
"""


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory) -> Path:
    """One cache for the module's runs: the first analyses the package."""
    return tmp_path_factory.mktemp("mypy_cache")


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        pytest.param(USER_CODE, None, id="every public name"),
        pytest.param(
            "from kedro_streaming import SparkStreamingDatset\n",
            'Module "kedro_streaming" has no attribute "SparkStreamingDatset"',
            id="misspelt name",
        ),
        pytest.param(
            USER_CODE + "security.uses_tls + 'a'\n",
            'Unsupported operand types for + ("bool" and "str")',
            id="a public name's type",
        ),
    ],
)
def test_mypy_sees_the_public_names(code, expected, tmp_path, mypy_cache):
    user = tmp_path / "user.py"
    user.write_text(code)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(mypy_cache), str(user)],
        cwd=tmp_path,  # no configuration of this repository's
        capture_output=True,
        text=True,
        check=False,
    )
    if expected is None:
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        assert done.returncode != 0
        assert expected in done.stdout, done.stdout + done.stderr
