"""kedro-streaming is pinned: its wheel in wheels/ is the file requirements.txt
names, byte for byte, or it comes from a git URL at a tag or commit."""

import hashlib
import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
WHEEL = re.compile(
    r"\./(wheels/kedro_streaming-[^-\s]+-py3-none-any\.whl)(?:\[dev\])?  # sha256:(\w+)"
)
GIT = re.compile(r"kedro-streaming(?:\[dev\])? @ git\+\S+@\S+")


def test_kedro_streaming_is_pinned_by_version_and_hash():
    (line,) = [
        line
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if "kedro-streaming" in line.split("#")[0]
        or "kedro_streaming" in line.split("#")[0]
    ]
    wheel = WHEEL.fullmatch(line)
    if wheel is None:
        assert GIT.match(line), line
        return
    path, digest = wheel.groups()
    # One wheel: an old one left beside a new would be shipped for nothing.
    assert [p.name for p in (ROOT / "wheels").glob("*.whl")] == [Path(path).name]
    # A different wheel under the same name (rebuilt, or changed by hand)
    # is not the one the project was tested with: record its sha256.
    assert hashlib.sha256((ROOT / path).read_bytes()).hexdigest() == digest, (
        f"{path} is not the wheel requirements.txt pins: see docs/upgrading.md"
    )
