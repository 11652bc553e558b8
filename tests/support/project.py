"""Projects made from the starter: `kedro new`, the walkthrough's project,
virtualenvs, what a tidy project holds, prefetches.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import venv
from collections.abc import Sequence
from pathlib import Path

import yaml

from support.common import PLUGIN_SOURCE, PROJECT_NAME, SPARK_VERSION, STARTER_ROOT, run


def generate_project(
    workdir: Path, starter: Path = STARTER_ROOT, **config: str
) -> Path:
    """`kedro new --starter=<this repo> --config`, as a user scripts it.

    Args:
        workdir: Where the project folder is made.
        starter: The starter's clone, this repository by default.
        config: Further keys of the config file, e.g. ``spark_version``.
    """
    # A config file answers every prompt of prompts.yml.
    config = {
        "project_name": PROJECT_NAME,
        "spark_version": SPARK_VERSION,
        "example": "taxi",
        "output_dir": str(workdir),
        **config,
    }
    path = workdir / "config.yml"
    path.write_text(yaml.safe_dump(config))
    kedro_new = [sys.executable, "-m", "kedro", "new", "--starter", str(starter)]
    run([*kedro_new, "--config", str(path), "--telemetry", "no"], cwd=workdir)
    return workdir / config["project_name"].lower().replace(" ", "-")


def generate_away(workdir: Path) -> Path:
    """A project made from a clone of this repository which is then deleted,
    and moved to another folder: what a teammate, a CI runner or a cluster's
    driver has. Nothing of it can point at the clone any more."""
    clone = workdir / "clone"
    shutil.copytree(STARTER_ROOT, clone, ignore=_not_in_a_clone)
    (workdir / "made").mkdir()
    made = generate_project(workdir / "made", clone)
    shutil.rmtree(clone)
    moved = workdir / USER_FOLDER / made.name
    moved.parent.mkdir(parents=True)
    shutil.move(made, moved)
    return moved


# Where laptops keep projects: a space and non-ASCII letters in the path
# (issue 67), so every file the runtime writes or hands to the JVM is tested
# there. The session's project and every copy a test runs live under it.
USER_FOLDER = Path("My Streams") / "Données été"


def _not_in_a_clone(folder: str, names: list[str]) -> list[str]:
    """What a fresh clone does not have: virtualenvs, build output, caches."""
    at_root = Path(folder) == STARTER_ROOT
    return [
        name
        for name in names
        if name in ("__pycache__", ".pytest_cache", ".ruff_cache")
        or name.endswith(".egg-info")
        or (at_root and (name in (".git", "build") or "venv" in name))
    ]


# In a docs page: a whole file (a fenced block whose first line names its
# path), or a block of commands.
PAGE_BLOCK = re.compile(
    r"```(?:(?:python|yaml)\n# (?P<path>\S+)\n(?P<body>.*?)|bash\n(?P<commands>.*?))```",
    re.DOTALL,
)


def walkthrough_project(made: Path, workdir: Path, servers: str, commands=None) -> Path:
    """A copy of a project made with `example: none`, with the files of its
    docs/your-own-stream.md written and, if ``commands`` is given, each
    block of commands handed to it, in the page's order: a command that the
    page shows before the file it needs fails as the reader's would. The
    broker is at ``servers``."""
    project = workdir / made.name
    shutil.copytree(made, project)
    page = (project / "docs/your-own-stream.md").read_text()
    for block in PAGE_BLOCK.finditer(page):
        if block["commands"] is not None:
            if commands is not None:
                commands(block["commands"])
            continue
        target = project / block["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        body = block["body"]
        if block["path"] == "conf/kafka/globals.yml":
            body = body.replace("localhost:9092", servers)
        target.write_text(f"# {block['path']}\n{body}")
    return project


def assert_tidy_home(project: Path, project_bin: Path) -> None:
    """ruff-clean, no template left, and a README that is a home page: short,
    its examples tests of the project's, every link of it and docs/ alive."""
    for path in project.rglob("*"):
        assert "cookiecutter" not in path.name
        if path.suffix in {".py", ".yml", ".toml", ".md", ".txt"}:
            assert "cookiecutter." not in path.read_text(), path
    run([project_bin / "ruff", "format", "--check", "."], cwd=project)
    run([project_bin / "ruff", "check", "."], cwd=project)
    readme = (project / "README.md").read_text()
    assert len(readme.splitlines()) < 250
    tests = "".join(path.read_text() for path in project.glob("tests/**/test_*.py"))
    examples = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    assert examples and all(example in tests for example in examples)
    for page in [project / "README.md", *project.glob("docs/*.md")]:
        for target in re.findall(r"\]\(([^)#:]+)\)", page.read_text()):
            assert (page.parent / target).exists(), (page.name, target)


def make_line_project(workdir: Path, version: str) -> tuple[Path, Path]:
    """A project made for Spark ``version``, in a virtualenv of its own."""
    project = generate_project(workdir, spark_version=version)
    if "pyspark" in PREFETCHES:  # its wheel, built meanwhile into a folder
        PREFETCHES["pyspark"].join()
    venv_dir = workdir / "venv"
    return project, install_project(project, venv_dir, find_links=PREFETCHED_WHEELS)


def resolve_spark_packages(project: Path, bin_dir: Path) -> None:
    """Resolves, once, every Spark package the project's environments name
    (`spark.jars.packages` of each conf/*/spark.yml) into Ivy's cache, which
    the JVMs of both test workers then read: two first resolutions at once
    would download the same jars into it together."""
    packages = sorted(
        {
            package.strip()
            for spark_yml in project.glob("conf/*/spark.yml")
            for package in str(
                (yaml.safe_load(spark_yml.read_text()) or {}).get(
                    "spark.jars.packages", ""
                )
            ).split(",")
            if package.strip()
        }
    )
    session = (
        "from pyspark.sql import SparkSession; SparkSession.builder"
        ".master('local[1]').config('spark.ui.enabled', 'false')"
        f".config('spark.jars.packages', {','.join(packages)!r})"
        ".getOrCreate().stop()"
    )
    run([bin_dir / "python", "-c", session], cwd=project, timeout=900)


def start_prefetches(cache: Path) -> None:
    """Fetches in the background what later tests download, while the first
    ones run: the schema registry's application (Maven) and the other Spark
    lines' PySpark, built into wheels in ``cache``, where their projects' uv
    installs find them (``--find-links``). Each takes a file lock, so that two
    sessions (or xdist's two workers) fetch once, and the tests that need them
    wait for them."""

    def registry() -> None:
        sys.path.insert(0, str(PLUGIN_SOURCE))
        module = __import__("kedro_streaming.devtools.registry", fromlist=["_"])
        with contextlib.suppress(Exception):  # the fixture fetches it then
            module.resolve_registry()

    def pyspark() -> None:
        for version in OTHER_SPARK_VERSIONS:
            pyspark_wheel(cache, version)

    PREFETCHED_WHEELS.append(cache)
    for name, fetch in (("registry", registry), ("pyspark", pyspark)):
        PREFETCHES[name] = threading.Thread(target=fetch, daemon=True)
        PREFETCHES[name].start()


PREFETCHES: dict[str, threading.Thread] = {}


# The folder the pyspark prefetch builds its wheels into (start_prefetches).
PREFETCHED_WHEELS: list[Path] = []


def pyspark_wheel(folder: Path, version: str) -> None:
    """PySpark ``version``'s wheel in ``folder``, built once per folder.

    PyPI has PySpark as a source distribution only. uv has no `pip wheel`
    and, when the index serves it without HTTP caching headers (as some
    mirrors do), builds it again at every install, keeping each build in its
    cache (1.4 GB a session). pip keeps the wheel it built; an unchanged
    file in a lasting folder is one entry in uv's cache. A file lock: two
    sessions (or xdist's two workers) build it once."""
    folder.mkdir(parents=True, exist_ok=True)
    lock_path = Path(tempfile.gettempdir()) / "starter-tests-pyspark-wheels.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not list(folder.glob(f"pyspark-{version}-*.whl")):
            subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps"]
                + ["-w", str(folder), f"pyspark=={version}"],
                check=False,
                capture_output=True,
            )


def project_pyspark(project: Path) -> str:
    """The PySpark version ``project``'s requirements.txt pins."""
    for line in (project / "requirements.txt").read_text().splitlines():
        if line.startswith("pyspark=="):
            return line.split("==", 1)[1].split()[0]
    raise AssertionError(f"{project}/requirements.txt pins no pyspark")


# The other Spark lines tests/test_spark_lines.py runs (comma-separated).
OTHER_SPARK_VERSIONS = [
    version
    for version in os.environ.get("STARTER_OTHER_SPARK_VERSIONS", "4.0.0").split(",")
    if version
]


def install_project(
    project: Path, env_dir: Path, find_links: Sequence[Path] = ()
) -> Path:
    """A fresh virtualenv with ``project`` installed, as its README says (the
    dev and connect extras too); returns its bin/ folder.

    uv (tests/requirements.txt) installs it: on an empty cache about half
    pip's time (tests/README.md). ``find_links``: folders of wheels it takes
    before building a source distribution (start_prefetches)."""
    venv.create(env_dir, with_pip=True)  # tests run pip in it later
    bin_dir = env_dir / "bin"
    # Editable, so `python -m <package>.<command>` works; the copies the tests
    # run in hold the same code and read their own conf/ and data/. One uv
    # run: one resolve. Bytecode compiled as pip does: without it every
    # process compiles what it imports when it cannot write its cache
    # (PYTHONDONTWRITEBYTECODE), seconds each.
    uv = Path(sys.executable).parent / "uv"
    venv_python = ("--python", bin_dir / "python")
    links = [arg for folder in find_links for arg in ("--find-links", folder)]
    run(
        [
            *(uv, "pip", "install", "-q", "--compile-bytecode", *venv_python),
            *links,
            *("-r", "requirements.txt", "-e", ".[dev,connect]"),
        ],
        cwd=project,
        timeout=1500,
    )
    # uv records no hash for the plugin's wheel (PEP 610's archive_info),
    # which a user's pip does and test_starter.py checks: pip puts it back
    # from requirements.txt, the rest already satisfied.
    run([uv, "pip", "uninstall", "-q", *venv_python, "kedro-streaming"], cwd=project)
    run(
        [
            bin_dir / "python",
            *("-m", "pip", "install", "-q", "--disable-pip-version-check"),
            *("--no-deps", "-r", "requirements.txt"),
        ],
        cwd=project,
    )
    return bin_dir


def venv_like(bin_dir: Path, env_dir: Path) -> Path:
    """A fresh virtualenv holding what ``bin_dir``'s holds, each package at its
    version (uv's cache makes it in seconds); returns its bin/ folder.

    For a test that installs into its virtualenv: the session's venv is
    shared by the tests running beside it on the other worker, which must not
    see a package change under them (a plugin one version up, a project
    installed from another folder)."""
    uv = Path(sys.executable).parent / "uv"
    env_dir.mkdir(parents=True)
    frozen = run([uv, "pip", "freeze", "--python", bin_dir / "python"], cwd=env_dir)
    requirements = env_dir / "requirements.txt"
    requirements.write_text(frozen.stdout)
    venv.create(env_dir, with_pip=True)  # tests run pip in it later
    own = env_dir / "bin"
    run(
        [
            *(uv, "pip", "install", "-q", "--compile-bytecode", "--no-deps"),
            *("--python", own / "python", "-r", requirements),
        ],
        cwd=env_dir,
        timeout=600,
    )
    return own


def installed_from(bin_dir: Path, package: str) -> dict:
    """Where pip installed ``package`` in the virtualenv from (PEP 610)."""
    found = run(
        [
            bin_dir / "python",
            "-c",
            "import importlib.metadata as m, sys;"
            f"print(m.distribution('{package}').read_text('direct_url.json'))",
        ],
        cwd=bin_dir,
    )
    return json.loads(found.stdout)


def combine_environments(project: Path, name: str, *envs: str) -> None:
    """Makes conf/<name> from several environments, file by file, the later
    winning key by key: as a user combines Kafka sources with Delta tables."""
    target = project / "conf" / name
    target.mkdir()
    files = {
        path.name for env in envs for path in (project / "conf" / env).glob("*.yml")
    }
    for file_name in sorted(files):
        merged: dict = {}
        for env in envs:
            path = project / "conf" / env / file_name
            if path.exists():
                merged = _merge(merged, yaml.safe_load(path.read_text()) or {})
        (target / file_name).write_text(yaml.safe_dump(merged, sort_keys=False))


def _merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        both_mappings = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merge(merged[key], value) if both_mappings else value
    return merged


def bundled_lines(project: Path) -> list[str]:
    """The non-blank lines of the example's landing files, in name order."""
    landing = sorted((project / "data/01_raw/trips_landing").glob("*.json"))
    return [
        line
        for path in landing
        for line in path.read_text().splitlines()
        if line.strip()
    ]
