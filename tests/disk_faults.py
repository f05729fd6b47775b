"""Disk faults for the tests that strike a SQLite store's files (tests/integration, tests/drills): a
small disk to fill, a file flag that refuses writes, and filling a disk to the last byte."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(disk: Path, size: str = "8m") -> Iterator[Path]:
    """Mount a tmpfs of ``size`` on ``disk`` (created) for the block; skips where mounting is refused."""
    disk.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)],
                              capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no mount command: cannot make a small disk to fill")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}): the disk-full case needs one")
    try:
        yield disk
    finally:
        if subprocess.run(["umount", str(disk)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def chattr(flag: str, *paths: Path) -> subprocess.CompletedProcess[str]:
    """``chattr +i`` / ``-i``: an immutable file refuses writes even to a process that has it open."""
    return subprocess.run(["chattr", flag, *map(str, paths)], capture_output=True, text=True)


def fill(folder: Path) -> Path:
    """Write a file until the disk is full, to the last byte; returns it."""
    filler = folder / "filler"
    chunk = b"\0" * 65536
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return filler
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)
