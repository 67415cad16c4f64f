from __future__ import annotations

from pathlib import Path

import pytest

from forensics.synthetic.journal_writer import journal_remote_available

from . import corpus


@pytest.fixture(scope="session")
def renderings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    # No skip: without systemd-journal-remote these tests must fail, not vanish.
    assert journal_remote_available(), "install systemd-journal-remote (see .ci/run)"
    return corpus.build(tmp_path_factory.mktemp("corpus"))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "t.duckdb"
