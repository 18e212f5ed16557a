"""Background writes of result files (harness/background_write.py, ``RunFolder.write_table_in_background``
and ``RunFolder.wait_for_writes`` in harness/results.py): the file is complete once waited for, a failed
write raises in the thread that waits, every write is waited for before an error is raised, and the
thread is not a daemon (an exiting process waits for it)."""

from __future__ import annotations

import threading
from pathlib import Path

import pandas as pd
import pytest

from harness.background_write import BackgroundWrite
from harness.results import RunFolder
from harness.tables import Table


def _table() -> Table:
    return Table.from_rows([{"a": 1, "b": 0.5}, {"a": 2, "b": 1.5}])


def test_a_table_written_in_the_background_is_the_same_file(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    folder.write_table("plain.parquet", _table())
    folder.write_table_in_background("background.parquet", _table())
    folder.wait_for_writes()
    assert (tmp_path / "background.parquet").read_bytes() == (tmp_path / "plain.parquet").read_bytes()
    assert pd.read_parquet(tmp_path / "background.parquet")["a"].tolist() == [1, 2]
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]
    folder.wait_for_writes()  # nothing left to wait for: returns at once


def test_the_write_runs_in_a_thread_that_is_not_a_daemon(tmp_path: Path) -> None:
    release = threading.Event()
    seen: list[threading.Thread] = []

    def write() -> None:
        seen.append(threading.current_thread())
        release.wait(10)

    pending = BackgroundWrite(tmp_path / "x.parquet", write)
    try:
        assert seen and seen[0] is not threading.current_thread()
        assert not seen[0].daemon and seen[0].is_alive()
    finally:
        release.set()
    assert pending.wait() == tmp_path / "x.parquet"
    assert not seen[0].is_alive()


def test_a_failed_write_raises_in_the_waiting_thread(tmp_path: Path) -> None:
    def write() -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        BackgroundWrite(tmp_path / "x.parquet", write).wait()


def test_every_write_is_waited_for_before_the_first_error_is_raised(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    folder = RunFolder(tmp_path)
    real_write_table = RunFolder.write_table

    def write_table(self: RunFolder, name: str, table: Table) -> Path:
        if name == "bad.parquet":
            raise OSError(28, "No space left on device")
        return real_write_table(self, name, table)

    monkeypatch.setattr(RunFolder, "write_table", write_table)
    folder.write_table_in_background("bad.parquet", _table())
    folder.write_table_in_background("good.parquet", _table())
    with pytest.raises(OSError, match="No space left"):
        folder.wait_for_writes()
    assert (tmp_path / "good.parquet").is_file() and not (tmp_path / "bad.parquet").exists()
    folder.wait_for_writes()  # the failed write is not raised twice
