"""kedro-streaming, the plugin every generated project installs: its own tests,
run once here (not in every project), on the default Spark line."""

from __future__ import annotations

import sys
from pathlib import Path

from support.common import PLUGIN_ROOT, SHIPPED_JIT, run
from support.project import venv_like


def test_plugin_passes_ruff_and_its_own_tests(project_bin, tmp_path):
    """The runtime's tests (datasets, checks, queries, metrics, the stream
    harness) in the project's virtualenv, where pip built the plugin from this
    repository as the project's requirements.txt names it: a copy of it, to
    which the plugin's test extra is added without changing the session's."""
    project_bin = venv_like(project_bin, tmp_path / "venv")
    for command in (["format", "--check"], ["check"]):
        run([sys.executable, "-m", "ruff", *command, "."], cwd=PLUGIN_ROOT)
    installed = run(
        [
            project_bin / "python",
            "-c",
            "import kedro_streaming as k; print(k.__file__)",
        ],
        cwd=PLUGIN_ROOT.parent,
    )
    assert "site-packages" in installed.stdout  # the built plugin, not the source
    # The plugin's test extra has mypy (its public names, type-checked as a
    # user's module imports them) and hypothesis (changes in any order and
    # batching); a project's does not.
    uv = Path(sys.executable).parent / "uv"
    venv = ("--python", project_bin / "python")
    run(
        [uv, "pip", "install", "-q", *venv, "mypy>=1.10", "hypothesis>=6.100"],
        cwd=PLUGIN_ROOT,
    )
    result = run(
        [project_bin / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=PLUGIN_ROOT,
        env=SHIPPED_JIT,
        # About 11 minutes alone, 14 beside another test file (0.13.0: the
        # change feeds' tests, two of them killing a run of their own).
        timeout=1500,
    )
    assert " passed" in result.stdout and "failed" not in result.stdout
    # pytest.ini filters kafka-python's own by name: any other shows here.
    assert "warnings summary" not in result.stdout, result.stdout
    print(f"the plugin's tests: {result.seconds:.1f} s")
