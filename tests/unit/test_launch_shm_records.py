"""Shared-memory files recorded for a tree are removed only while unused and still the same file."""

from __future__ import annotations

import mmap
import os
import sys
import time

import pytest

from systems.launch import shm
from systems.launch.processes import ManagedProcess


def test_remove_recorded_removes_exactly_the_unused_same_files(tmp_path):
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    ours = shm_dir / "psm_ours"
    ours.write_bytes(b"x")
    recreated = shm_dir / "sem.mp-recreated"
    recreated.write_bytes(b"x")
    in_use = shm_dir / "psm_in_use"
    in_use.write_bytes(b"x")
    unrecorded = shm_dir / "psm_someone_elses"
    unrecorded.write_bytes(b"x")
    outside = tmp_path / "outside"
    outside.write_bytes(b"x")
    recorded = shm.inodes([ours, recreated, in_use, outside])
    recorded[recreated] += 1  # recorded with another inode: the file now under that name is a new one
    with open(in_use, "rb"):  # held open by a live process (this one)
        removed = shm.remove_recorded(recorded, shm_dir)
    assert removed == [ours]
    assert not ours.exists()
    assert recreated.exists() and in_use.exists() and unrecorded.exists() and outside.exists()


def test_remove_recorded_keeps_a_mapped_file(tmp_path):
    import mmap
    path = tmp_path / "psm_mapped"
    path.write_bytes(b"\0" * 4096)
    with open(path, "r+b") as f:
        mapping = mmap.mmap(f.fileno(), 4096)
    try:  # the file is closed, but still mapped
        assert path in shm.files_used_by([os.getpid()], tmp_path)
        assert shm.remove_recorded(shm.inodes([path]), tmp_path) == []
        assert path.exists()
    finally:
        mapping.close()
    assert shm.remove_recorded(shm.inodes([path]), tmp_path) == [path]


def test_inodes_skips_missing_files_and_directories(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_bytes(b"")
    assert set(shm.inodes([tmp_path / "d", tmp_path / "f", tmp_path / "missing"])) == {tmp_path / "f"}



@pytest.mark.integration
def test_semaphores_a_killed_tree_leaves_are_removed_at_stop_unless_in_use(tmp_path):
    # a tree whose resource tracker dies with it leaves multiprocessing semaphores it was never seen mapping
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    (shm_dir / "sem.mp-before").write_bytes(b"x")  # there before the tree started: never touched
    script = ("import pathlib, sys; d = pathlib.Path(sys.argv[1]); "
              "[(d / n).write_bytes(b'x') for n in ('sem.mp-leaked', 'sem.mp-held', 'psm_unattributed')]")
    proc = ManagedProcess("semaphores", runtime_dir=tmp_path / "run", shm_dir=shm_dir)
    try:
        proc.start([sys.executable, "-c", script, str(shm_dir)], log_path=tmp_path / "log")
        deadline = time.monotonic() + 120
        while not (shm_dir / "psm_unattributed").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        with open(shm_dir / "sem.mp-held", "rb"):  # still used by a live process (this one)
            proc.stop(grace_s=5.0)
            left = sorted(p.name for p in shm_dir.iterdir())
    finally:
        proc.stop(grace_s=5.0)
    assert left == ["psm_unattributed", "sem.mp-before", "sem.mp-held"]
    # once nothing uses it, the next stop takes the held one too; the unattributed file stays
    assert sorted(p.name for p in shm_dir.iterdir()) == ["psm_unattributed", "sem.mp-before"]


def test_a_semaphore_mapped_under_its_temporary_name_counts_as_in_use(tmp_path):
    # glibc's sem_open: map a temporary file, link it to the semaphore's name, unlink the temporary name; the
    # creator's /proc/PID/maps then names only "sem.XXXXXX (deleted)", never "sem.mp-fresh"
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    temporary, final = shm_dir / "sem.Ab12Cd", shm_dir / "sem.mp-fresh"
    temporary.write_bytes(b"\0" * mmap.PAGESIZE)
    with temporary.open("r+b") as fh:
        mapping = mmap.mmap(fh.fileno(), mmap.PAGESIZE)
    os.link(temporary, final)
    temporary.unlink()
    try:
        assert final not in shm.files_used_by([os.getpid()], shm_dir)  # by name it looks unused ...
        assert shm.unused([final], shm_dir) == set()  # ... by inode it is not
    finally:
        mapping.close()
    assert shm.unused([final, shm_dir / "missing"], shm_dir) == {final}
