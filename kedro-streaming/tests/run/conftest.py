"""Each run test in a folder of its own."""

import pytest


@pytest.fixture(autouse=True)
def in_a_folder_of_its_own(tmp_path_factory, monkeypatch):
    """Each test in a folder of its own, where the source folder `in` is."""
    folder = tmp_path_factory.mktemp("cwd")
    (folder / "in").mkdir()
    monkeypatch.chdir(folder)
