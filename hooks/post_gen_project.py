"""After the files are written: where kedro-streaming comes from, the files
of the chosen example, and its data, so that `pip install -r requirements.txt`
and `kedro run` work at once."""

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

# The plugin's source in the starter; the starter's root is its distribution.
PLUGIN_DIR = "kedro-streaming"
PLUGIN_SOURCE = f"{PLUGIN_DIR}/src/kedro_streaming"
# Where a project made from a clone keeps the plugin's wheel (committed with it).
WHEELS = "wheels"


def plugin_version(starter: Path) -> str:
    init = starter / PLUGIN_SOURCE / "__init__.py"
    return re.search(r'__version__ = "([^"]+)"', init.read_text())[1]


def plugin_requirement(template: str, repo_dir: str, checkout: str) -> str:
    """A requirements line for the plugin of the starter the project came
    from: the git URL at the checked-out tag (or commit), else its wheel,
    built into the project's wheels/ (see `vendor_plugin`)."""
    if template.startswith("git+") or re.match(r"^(https?|ssh|git)://|^git@", template):
        url = template if template.startswith("git+") else f"git+{template}"
        ref = checkout if checkout not in ("", "None") else None
        if ref is None:  # the default branch moves: pin the commit it was at
            ref = subprocess.run(
                ["git", "-C", repo_dir, "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        return f"kedro-streaming[dev] @ {url}@{ref}"
    # The hook runs in the new project's folder: a relative starter path is
    # relative to where `kedro new` was typed, which the shell keeps in PWD.
    return vendor_plugin(Path(os.environ.get("PWD", "."), repo_dir).resolve())


def vendor_plugin(starter: Path) -> str:
    """Builds the plugin's wheel into wheels/ and returns the line that
    installs it: a path from the project's root (pip reads a path in a
    requirements file from the current folder), and its sha256, which the
    project's tests/test_requirements.py checks. A clone's path would not
    travel to a teammate's machine, a CI runner or a cluster's driver."""
    with tempfile.TemporaryDirectory() as source:
        # A copy of the distribution (the root's pyproject.toml and
        # kedro-streaming/): building in the clone would leave build/ there,
        # whose stale files a later wheel would take in.
        shutil.copy(starter / "pyproject.toml", source)
        shutil.copytree(
            starter / PLUGIN_DIR,
            Path(source, PLUGIN_DIR),
            ignore=shutil.ignore_patterns(
                "build", "*.egg-info", "__pycache__", "tests"
            ),
        )
        built = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q"]
            + ["--disable-pip-version-check", *build_isolation(starter)]
            + ["-w", WHEELS, source],
            capture_output=True,
            text=True,
            check=False,
        )
    if built.returncode != 0:
        sys.exit(
            "kedro-streaming's wheel could not be built from "
            f"{starter} (`python -m pip wheel`): {built.stderr.strip()[-2000:]}"
        )
    wheel = next(Path(WHEELS).glob("kedro_streaming-*.whl"))
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return f"./{WHEELS}/{wheel.name}[dev]  # sha256:{digest}"


def build_isolation(starter: Path) -> list[str]:
    """pip's option to build with this Python's setuptools when it is the
    version the distribution requires: no download of it into an isolated
    build environment, which is most of the build's time."""
    pyproject = (starter / "pyproject.toml").read_text()
    required = re.search(r'requires = \["setuptools>=(\d+)', pyproject)
    try:
        installed = int(metadata.version("setuptools").split(".")[0])
    except (metadata.PackageNotFoundError, ValueError):
        return []
    if required and installed >= int(required[1]):
        return ["--no-build-isolation"]
    return []


def write_plugin_requirement() -> None:
    repo_dir = "{{ cookiecutter._repo_dir }}"
    requirement = plugin_requirement(
        "{{ cookiecutter._template }}", repo_dir, "{{ cookiecutter._checkout }}"
    )
    version = plugin_version(Path(os.environ.get("PWD", "."), repo_dir).resolve())
    if "  # sha256:" not in requirement:
        requirement += f"  # {version} when the project was made"
    path = Path("requirements.txt")
    lines = [
        requirement if line.startswith("kedro-streaming") else line
        for line in path.read_text().splitlines()
    ]
    path.write_text("\n".join(lines) + "\n")


# The files of the taxi example, which a project made with `example: none`
# does not have; .starter/none/ holds what it has instead.
TAXI_ONLY = [
    "src/{{ cookiecutter.python_package }}/pipelines/ingest",
    "src/{{ cookiecutter.python_package }}/pipelines/aggregate",
    "src/{{ cookiecutter.python_package }}/pipelines/live",
    "src/{{ cookiecutter.python_package }}/pipelines/zones",
    "src/{{ cookiecutter.python_package }}/pipelines/publish",
    "src/{{ cookiecutter.python_package }}/pipelines/realtime",
    "src/{{ cookiecutter.python_package }}/pipelines/dedupe",
    "tests/pipelines/ingest",
    "tests/pipelines/aggregate",
    "tests/pipelines/realtime",
    "tests/pipelines/dedupe",
    "tests/pipelines/live",
    "tests/pipelines/zones",
    "tests/conftest.py",
    "tests/test_run.py",
    "tools",
    "conf/base/schemas",
    "conf/kafka/catalog.yml",
    "conf/kafka/globals.yml",
    "conf/delta/catalog.yml",
    "docker-compose.yml",
    "docker-compose.tls.yml",
    "docs/expectations.md",
    "docs/streams.md",
    "docs/kafka.md",
    "docs/realtime.md",
    "docs/delta.md",
    "docs/guarantees.md",
    "docs/configuration.md",
]


def without_the_taxi_example() -> None:
    for relative in TAXI_ONLY:
        path = Path(relative)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    overlay = Path(".starter/none")
    for source in sorted(overlay.rglob("*")):
        if source.is_file():
            target = source.relative_to(overlay)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(source, target)


EXAMPLE = "{{ cookiecutter.example }}"

write_plugin_requirement()
if EXAMPLE == "none":
    without_the_taxi_example()
shutil.rmtree(".starter")
# Tools' caches a clone's template folder may hold (copied as they are, not
# rendered): not the new project's.
for cache in (".ruff_cache", ".pytest_cache", ".mypy_cache"):
    shutil.rmtree(cache, ignore_errors=True)


def plugin_feed(starter: Path):
    """``write_feed`` of the starter's plugin, read from its file: the plugin
    is not installed where `kedro new` runs (the module needs the standard
    library only)."""
    spec = importlib.util.spec_from_file_location(
        "kedro_streaming_feed", starter / PLUGIN_SOURCE / "devtools" / "feed.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_feed


if EXAMPLE == "taxi":
    sys.path.insert(0, str(Path.cwd()))  # the project root, which holds tools/
    from tools import trips

    starter = Path(os.environ.get("PWD", "."), "{{ cookiecutter._repo_dir }}")
    trips.init(write_feed=plugin_feed(starter.resolve()))
