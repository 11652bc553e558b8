"""The recipes of docs/: each page that says "`tests/test_docs.py` runs every
Python block of this page", run as this module's tests, so that the code a
page shows is the code that passes.

A page's Python blocks run in order in one namespace. A block whose first
line names a file of the project (``# src/<package>/pipelines/<name>/nodes.py``)
is that file, and an import of such a file (``from .nodes import f``, or
``from <package>.pipelines.<name>.nodes import f`` in a test) gives what the
page defined; other imports are real. Each ``test_*`` function of the page
is a test, given the fixtures it names: ``stream_test``, and
``project_parameters``, the project's parameters with those of the page's
parameter files (as the project has them once the page's files are added). The
page's YAML blocks whose first line names a file of ``conf/`` are checked
against the project's configuration: the catalog entries build, with no key
their dataset does not take, and every dataset and parameter of the page's
pipeline (each ``create_pipeline`` it defines) is declared."""

import inspect
import re
import shutil
from pathlib import Path

import pytest
import yaml
from kedro.config import MissingConfigException
from kedro.framework.project import settings
from kedro.framework.startup import bootstrap_project
from kedro.io import DataCatalog
from kedro_streaming import SparkStreamingDataset

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.DOTALL | re.MULTILINE)
# A line that starts a file of the project: its path, alone on the line.
FILE_LINE = re.compile(r"^# ((?:src|conf|tests)/\S+\.(?:py|yml))$", re.MULTILINE)
IMPORT = re.compile(r"^from ([\w.]+) import ([\w, ]+)$", re.MULTILINE)
TESTED = re.compile(
    r"`tests/test_docs\.py`\s+runs\s+every\s+Python\s+block\s+of\s+this\s+page"
)


def recipe(page: str) -> dict:
    """The page's Python blocks, run in order in one namespace, each at its
    own lines of the page (so that a failure points at the page's line).
    ``PIPELINES[page]`` gets each ``create_pipeline`` the page defines (a
    page of several recipes shows several pipelines)."""
    text = (DOCS / page).read_text()
    files = {path for path in FILE_LINE.findall(text) if path.endswith(".py")}
    namespace: dict = {"__name__": f"docs.{page}"}
    PIPELINES[page] = []
    for block in BLOCK.finditer(text):
        code = "\n" * text.count("\n", 0, block.start(1)) + IMPORT.sub(
            lambda line: _own(line, files), block[1]
        )
        exec(compile(code, str(DOCS / page), "exec"), namespace)  # noqa: S102 (our own docs)
        made = namespace.get("create_pipeline")
        if made is not None and made not in PIPELINES[page]:
            PIPELINES[page].append(made)
    return namespace


def _own(line: re.Match, files: set[str]) -> str:
    """An import of a file the page shows, as the names it defined (a name
    it did not define fails there); any other import as it is."""
    module = line[1]
    if module.startswith("."):
        own = True
    else:
        own = f"src/{module.replace('.', '/')}.py" in files
    return f"{line[2]}  # {line[0]}" if own else line[0]


def conf_files(page: str) -> dict[str, str]:
    """The files of conf/ the page's YAML blocks show, by path (a block may
    show several, each from the line naming it)."""
    files: dict[str, str] = {}
    for block in YAML_BLOCK.finditer((DOCS / page).read_text()):
        starts = list(FILE_LINE.finditer(block[1]))
        ends = [start.start() for start in starts[1:]] + [len(block[1])]
        for start, end in zip(starts, ends[: len(starts)], strict=True):
            files[start[1]] = files.get(start[1], "") + block[1][start.end() : end]
    return {path: body for path, body in files.items() if path.startswith("conf/")}


PAGES = sorted(
    page.name
    for page in DOCS.glob("*.md")
    if TESTED.search(page.read_text()) and BLOCK.search(page.read_text())
)
PIPELINES: dict[str, list] = {}
RECIPES = {page: recipe(page) for page in PAGES}
STATEFUL = RECIPES["stateful.md"]


@pytest.fixture(scope="module")
def project_settings():
    bootstrap_project(ROOT)  # the project's settings.py: its config loader
    return settings


def page_parameters(page: str, project_parameters: dict) -> dict:
    """The project's parameters, with those of the page's parameter files."""
    parameters = dict(project_parameters)
    for path, body in conf_files(page).items():
        if Path(path).name.startswith("parameters"):
            parameters.update(yaml.safe_load(body) or {})
    return parameters


@pytest.mark.parametrize("test", sorted(n for n in STATEFUL if n.startswith("test_")))
def test_stateful_recipe(test, stream_test, project_parameters):
    parameters = page_parameters("stateful.md", project_parameters)
    _call(STATEFUL[test], stream_test, parameters)


# The tests of the other recipe pages (a project made with `example: none`
# has some), by page.
OTHER_TESTS = [
    (page, name)
    for page in PAGES
    if page != "stateful.md"
    for name in sorted(RECIPES[page])
    if name.startswith("test_")
]
if OTHER_TESTS:

    @pytest.mark.parametrize(("page", "test"), OTHER_TESTS)
    def test_recipe(page, test, stream_test, project_parameters):
        parameters = page_parameters(page, project_parameters)
        _call(RECIPES[page][test], stream_test, parameters)


def _call(function, stream_test, parameters: dict) -> None:
    given = {"stream_test": stream_test, "project_parameters": parameters}
    function(**{name: given[name] for name in inspect.signature(function).parameters})


@pytest.mark.parametrize("page", PAGES)
def test_recipe_configuration(page, tmp_path, project_settings, project_parameters):
    """The page's catalog entries, added to a copy of the project's conf/,
    build as `kedro run` builds them (interpolations, credentials), take
    every key they have, and declare, with the project's, every dataset of
    the page's pipeline; its parameters are declared too."""
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / settings.CONF_SOURCE, conf)
    shown = conf_files(page)
    page_entries: dict[str, str] = {}  # entry -> environment
    for path, body in shown.items():
        target = tmp_path / path
        if Path(path).name.startswith("catalog"):
            env = Path(path).parent.name
            page_entries.update(dict.fromkeys(yaml.safe_load(body) or {}, env))
            # Beside the project's own file, as a file of the same pattern.
            target = target.with_name(f"{target.stem}_{page[:-3]}.yml")
        elif target.exists():
            continue  # parameters: merged in page_parameters
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body)
    envs = sorted(set(page_entries.values()) - {"base"}) or ["local"]
    assert len(envs) == 1, f"{page}: catalog entries in {envs}: one environment"
    loader = project_settings.CONFIG_LOADER_CLASS(
        conf_source=str(conf), env=envs[0], **project_settings.CONFIG_LOADER_ARGS
    )
    try:
        credentials = loader["credentials"]
    except MissingConfigException:  # an environment without secrets
        credentials = {}
    catalog = DataCatalog.from_config(loader["catalog"], credentials)
    for name in page_entries:
        dataset = catalog.get(name)
        if isinstance(dataset, SparkStreamingDataset):
            assert dataset.key_problems() == [], (page, name)
    parameters = page_parameters(page, project_parameters)
    for create_pipeline in PIPELINES[page]:
        pipeline = create_pipeline()
        # What the pipeline reads and writes; what passes between its nodes
        # alone may stay in memory.
        for name in sorted(pipeline.inputs() | pipeline.outputs()):
            if name.startswith("params:"):
                key = name[len("params:") :].split(".")[0]
                assert key in parameters, f"{page}: {name} is declared nowhere"
            else:
                assert name in catalog, f"{page}: {name} is declared nowhere"
