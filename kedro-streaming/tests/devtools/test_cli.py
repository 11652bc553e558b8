"""``kedro streams`` (``kedro_streaming._cli``) and the development services'
command line (``kedro_streaming.devtools.cli``), as ``python -m
kedro_streaming.devtools`` and as ``kedro streams`` run it: click's test
runner, the real commands, and a scratch Kedro project where a command needs
one. Nothing here starts a service."""

from __future__ import annotations

import importlib.metadata
import json
import re
import shlex
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from kedro_streaming._cli import (
    COMMANDS,
    DEV_SERVICES,
    MISSING,
    commands,
    dev_extra_missing,
)
from kedro_streaming.devtools.cli import main

STREAMS = commands.commands["streams"]
# Each command line: its click group, the arguments that reach its lazy group,
# and that group.
CLIS = {
    "kedro streams": (commands, ["streams"], STREAMS),
    "python -m": (main, [], main),
}
LISTED = [(cli, name) for cli, (*_, lazy) in CLIS.items() for name in sorted(lazy.lazy)]


def command(group: click.Group, *path: str) -> click.Command:
    """The command at ``path`` below ``group``, imported."""
    for name in path:
        group = group.get_command(click.Context(group), name)
    return group


def command_paths(group: click.Group, path: tuple[str, ...] = ()):
    """The path of every command below ``group``, groups too."""
    for name in group.list_commands(click.Context(group)):
        yield (*path, name)
        if isinstance(group.get_command(click.Context(group), name), click.Group):
            yield from command_paths(command(group, name), (*path, name))


# The operations' commands stay unimported here: one that does not import
# fails its own tests, not this module's collection.
PATHS = sorted([(name,) for name in COMMANDS if name not in DEV_SERVICES])
PATHS += list(command_paths(main))


def test_the_services_are_the_commands_kedro_streams_mounts():
    services = [
        "broker",
        "cluster",
        "connect",
        "feed",
        "registry",
        "send",
        "submit",
        "watch",
    ]
    assert main.list_commands(click.Context(main)) == sorted(DEV_SERVICES) == services
    assert STREAMS.list_commands(click.Context(STREAMS)) == sorted(COMMANDS)


@pytest.mark.parametrize(
    ("cli", "name"), LISTED, ids=[f"{cli} {name}" for cli, name in LISTED]
)
def test_the_list_shows_each_command_with_its_short_help(cli, name):
    """The list reads each short help without importing the command: it is
    the command's own."""
    group, prefix, lazy = CLIS[cli]
    listed = CliRunner().invoke(group, [*prefix, "--help"], terminal_width=80)
    assert listed.exit_code == 0, listed.output
    # click's list: the terminal's 80 columns, less its spacing and the
    # longest name.
    limit = 80 - 6 - max(map(len, lazy.lazy))
    short_help = command(lazy, name).get_short_help_str(limit)
    assert re.search(rf"^  {name} +{re.escape(short_help)}$", listed.output, re.M), (
        listed.output
    )


@pytest.mark.parametrize("cli", CLIS)
def test_building_and_listing_the_commands_import_none_of_them(cli):
    """Neither the group nor its --help imports a command's module (nor Spark,
    nor Kedro's session): each is imported when it runs or shows its help."""
    modules = sorted({path.partition(":")[0] for path in COMMANDS.values()})
    modules += ["pyspark", "kedro.framework.session"]
    build = {
        "kedro streams": "from kedro_streaming._cli import commands as group",
        "python -m": "from kedro_streaming.devtools.cli import main as group",
    }[cli]
    script = textwrap.dedent(
        f"""
        import sys
        from click.testing import CliRunner
        {build}
        built = [name for name in {modules!r} if name in sys.modules]
        result = CliRunner().invoke(group, {CLIS[cli][1]!r} + ["--help"])
        assert result.exit_code == 0, result.output
        listed = [name for name in {modules!r} if name in sys.modules]
        print(built, listed)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[] []\n"


@pytest.mark.parametrize("path", PATHS, ids=[" ".join(path) for path in PATHS])
def test_every_command_has_help_naming_its_options(path):
    found = command(STREAMS, *path)
    for cli, prefix, lazy in CLIS.values():
        if path[0] not in lazy.lazy:
            continue
        result = CliRunner().invoke(cli, [*prefix, *path, "--help"])
        assert result.exit_code == 0, result.output
        assert f" {' '.join(path)} [OPTIONS]" in result.output
        for option in found.params:
            if isinstance(option, click.Option):
                assert option.opts[0] in result.output, (option.name, result.output)
        if isinstance(found, click.Group):
            assert all(name in result.output for name in found.commands)


def test_status_exits_3_unless_the_service_runs(tmp_path):
    for service in ("broker", "registry", "cluster", "connect"):
        result = CliRunner().invoke(
            main, [service, "status", "--data-dir", str(tmp_path / service)]
        )
        assert result.exit_code == 3, result.output
        assert json.loads(result.stdout)["running"] is False


def test_a_refused_option_is_one_error_line(tmp_path, monkeypatch):
    monkeypatch.delenv("KAFKA_SASL_PASSWORD", raising=False)
    result = CliRunner().invoke(
        commands,
        ["streams", "broker", "start", "--sasl-user", "alice:secret"],
        obj=None,
    )
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        "error: --sasl-user alice:...: a password on the command line is shown "
        "to every user of this machine (ps) and kept in the shell's history. "
        "Give --sasl-user alice and export KAFKA_SASL_PASSWORD (or type it when "
        "asked, on a terminal)\n"
    )
    assert not (tmp_path / "data").exists()


def test_a_broker_port_taken_is_named_with_what_to_do(tmp_path):
    """Before any Java starts: the port, where it was read, and the ways out
    (the starter's test_mistakes has a Kafka broker hold it)."""
    with socket.socket() as taken:  # as by another program
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            commands,
            [
                "streams",
                "broker",
                "start",
                "--port",
                str(port),
                "--data-dir",
                str(tmp_path / "broker"),
            ],
            obj=None,
        )
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: port {port} (--port) is taken by another program: stop it, or "
        "start this one on another port: `kedro streams broker start --port "
        "<port>` (--port 0: a free one), then set kafka.bootstrap_servers in "
        "conf/<env>/globals.yml to the address it prints\n"
    )
    assert not (tmp_path / "broker" / "broker.json").exists()


def test_without_the_dev_extra_one_line_says_how_to_install_it(monkeypatch):
    # As if fastavro were not installed: importing it raises ImportError.
    monkeypatch.setitem(sys.modules, "fastavro", None)
    assert dev_extra_missing()
    for arguments in (["broker", "start"], ["send", "--help"], ["submit"]):
        result = CliRunner().invoke(commands, ["streams", *arguments])
        assert result.exit_code == 1, result.output
        assert result.stdout == ""
        assert result.stderr == (
            "the development services need kedro-streaming[dev]: "
            'pip install "kedro-streaming[dev]"\n'
        )
    # The runtime's commands stay; the services' list says what they need.
    listed = CliRunner().invoke(commands, ["streams", "--help"])
    assert listed.exit_code == 0, listed.output
    assert re.search(
        r"^  broker +A development service \(needs kedro-streaming\[dev\]\)\.$",
        listed.output,
        re.M,
    ), listed.output
    assert "validate" in listed.output


def test_python_m_without_the_dev_extra(tmp_path):
    script = (
        "import runpy, sys; sys.modules['fastavro'] = None; "
        "sys.argv = ['x', 'broker', 'status']; "
        "runpy.run_module('kedro_streaming.devtools', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == MISSING + "\n"


@pytest.fixture
def packaged_project(tmp_path) -> Path:
    """A scratch Kedro project, ``demo``, packaged (``dist/``) as
    ``kedro package`` leaves it, with a ``cluster`` environment."""
    kedro = importlib.metadata.version("kedro")
    files = {
        "pyproject.toml": f"""
            [tool.kedro]
            package_name = "demo"
            project_name = "demo"
            kedro_init_version = "{kedro}"
            source_dir = "src"
            """,
        "src/demo/__init__.py": "",
        "src/demo/settings.py": """
            CONFIG_LOADER_ARGS = {"config_patterns": {"spark": ["spark*"]}}
            """,
        "conf/cluster/spark.yml": "spark.master: spark://127.0.0.1:1\n",
        "dist/demo-0.1-py3-none-any.whl": "",
        "dist/conf-demo.tar.gz": "",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return tmp_path


KEDRO_ARGS = ["--params", "trigger=available_now,note=a b", "--env", "x", "--dry-run"]


@pytest.mark.parametrize(
    "cli",
    [["-m", "kedro_streaming.devtools"], ["-m", "kedro", "streams"]],
    ids=["python -m", "kedro streams"],
)
def test_submit_hands_the_options_after_dashes_to_kedro_run(packaged_project, cli):
    """Every option after ``--`` reaches `kedro run`, as typed, even one
    ``submit`` has too (``--env``, ``--dry-run``)."""
    result = subprocess.run(
        [sys.executable, *cli, "submit", "--dry-run", "--", *KEDRO_ARGS],
        cwd=packaged_project,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    command = shlex.split(result.stderr.strip().splitlines()[-1])
    assert command[0].endswith("/bin/spark-submit")
    assert command[-len(KEDRO_ARGS) - 4 :] == [
        *("--env", "cluster", "--conf-source", "dist/conf-demo.tar.gz"),
        *KEDRO_ARGS,
    ]
    properties = packaged_project / "dist/spark-cluster.conf"
    assert properties.read_text() == "spark.master spark://127.0.0.1:1\n"
    assert "spark-submit" not in result.stdout  # stdout: the command's result only
