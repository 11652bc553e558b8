"""The real Prometheus and promtool (Debian's `prometheus` package), run by
the tests: a Prometheus scraping a run's endpoint with the shipped rules,
queried over its HTTP API, and promtool for the rules' unit tests.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from urllib.error import URLError
from urllib.parse import urlencode
from urllib.request import urlopen

import pytest
import yaml

from support.common import free_port

INSTALL = (
    "apt-get install -y prometheus (Debian's package: prometheus and promtool; "
    ".ci/run installs it)"
)

Labels = frozenset[tuple[str, str]]


def prometheus_tool(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``. Missing, the test fails in
    CI (``CI`` set) and is skipped elsewhere, saying how to install it."""
    path = shutil.which(name)
    if path is None:
        reason = f"no {name} on PATH: {INSTALL}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def promtool(*args: str | Path) -> subprocess.CompletedProcess:
    """Runs ``promtool <args>``, capturing its output."""
    command = [prometheus_tool("promtool"), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def scaled_rules(rules: Path, out: Path, factor: int = 60) -> Path:
    """A copy of a rules file with every duration in minutes (range windows,
    ``for``) read as as many seconds: over a run scraped every second, the
    rules then see what they would over one scraped every minute, for a
    run 60 times as long (the rules compare gauges, signs of trends and
    ratios of rates, which the scale leaves unchanged)."""
    assert factor == 60, "minutes to seconds only"
    doc = yaml.safe_load(rules.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule["expr"] = re.sub(r"\[(\d+)m\]", r"[\1s]", rule["expr"])
            if "for" in rule:
                rule["for"] = re.sub(r"^(\d+)m$", r"\1s", str(rule["for"]))
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


class Prometheus:
    """A real Prometheus process scraping ``127.0.0.1:<target_port>`` (job
    ``kedro-streams``) every ``interval`` and evaluating ``rule_files`` as
    often, its web API on a free port, its data and log in ``folder``.

    ``lookback`` is its ``--query.lookback-delta`` (how old the newest sample
    of an instant query may be).
    """

    def __init__(
        self,
        folder: Path,
        target_port: int,
        *,
        interval: str = "1s",
        rule_files: tuple[Path, ...] = (),
        lookback: str = "5m",
    ) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.target = f"127.0.0.1:{target_port}"
        self.log = folder / "prometheus.log"
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [
                {
                    "job_name": "kedro-streams",
                    "static_configs": [{"targets": [self.target]}],
                }
            ],
        }
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.command = [
            prometheus_tool("prometheus"),
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            f"--query.lookback-delta={lookback}",
        ]
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Prometheus:
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 30
        while True:
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            try:
                with urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except (URLError, OSError):
                pass
            assert time.monotonic() < deadline, self.log.read_text()[-3000:]
            time.sleep(0.2)

    def __exit__(self, *exc_info) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def api(self, path: str, **params: str | float) -> dict:
        """The ``data`` of an answer of the HTTP API (``/api/v1/<path>``)."""
        url = f"{self.url}/api/v1/{path}?{urlencode(params)}"
        with urlopen(url, timeout=30) as answer:
            body = json.loads(answer.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, at: float) -> dict[Labels, float]:
        """An instant query at Unix time ``at``: ``{labels: value}`` (a
        scalar's labels are empty)."""
        data = self.api("query", query=expr, time=at)
        if data["resultType"] == "scalar":
            return {frozenset(): float(data["result"][1])}
        return {
            frozenset(item["metric"].items()): float(item["value"][1])
            for item in data["result"]
        }

    def samples(self, selector: str, since: float, at: float) -> dict[Labels, list]:
        """The raw samples Prometheus holds of ``selector`` in (since, at]:
        ``{labels: [(time, value)]}``."""
        span = max(1, int(at - since) + 1)
        data = self.api("query", query=f"{selector}[{span}s]", time=at)
        return {
            frozenset(item["metric"].items()): [
                (float(t), float(v)) for t, v in item["values"] if float(t) > since
            ]
            for item in data["result"]
        }

    def wait_for(self, expr: str, want, timeout: float = 30) -> float:
        """Waits until ``expr``, queried now, gives ``want``; returns when."""
        deadline = time.monotonic() + timeout
        while True:
            at = time.time()
            got = self.query(expr, at)
            if got == want:
                return at
            assert time.monotonic() < deadline, (expr, got, want)
            time.sleep(0.5)
