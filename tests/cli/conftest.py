"""Helpers for the CLI tests: a tiny app module written into tmp_path, and real `python -m firesafe` runs."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

APP_SOURCE = '''
import os
import time
from pathlib import Path

from firesafe import App, Backoff, Permanent

HERE = Path({here!r})
app = App({url!r}, lease={lease!r})


def effect(key):
    with open(HERE / "effects.log", "a") as f:
        f.write(key + "\\n")


@app.job(queue="math")
def add(ctx, a: int, b: int) -> int:
    effect(ctx.job.key)
    return a + b


@app.job(max_attempts=2, backoff=Backoff(base=0.0, cap=0.0, jitter="none"))
def charge(ctx, order_id: str, api_key: str) -> dict:
    if order_id.startswith("bad"):
        raise RuntimeError(f"card declined api_key={{api_key}}")
    return {{"order": order_id}}


@app.job()
def slow(ctx, name: str, seconds: float) -> str:
    (HERE / (name + ".started")).touch()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not ctx.cancelled:
        time.sleep(0.02)
    if ctx.cancelled:
        raise RuntimeError("asked to stop")
    effect(ctx.job.key)
    return "done"


@app.job()
def crash_once(ctx) -> str:
    marker = HERE / "crashed"
    if not marker.exists():
        marker.touch()
        os._exit(3)
    effect(ctx.job.key)
    return "survived"
'''


@dataclass
class AppModule:
    dir: Path
    name: str
    url: str

    @property
    def target(self) -> str:
        return f"{self.name}:app"

    def effects(self) -> list[str]:
        path = self.dir / "effects.log"
        return path.read_text().split() if path.exists() else []

    def load(self) -> ModuleType:
        """Import the module in this process too (under a unique name), to enqueue and inspect."""
        spec = importlib.util.spec_from_file_location(f"{self.name}_{uuid.uuid4().hex[:6]}",
                                                      self.dir / f"{self.name}.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


def write_app(directory: Path, url: str, lease: float = 30.0, name: str | None = None) -> AppModule:
    name = name or f"fsapp_{uuid.uuid4().hex[:8]}"
    (directory / f"{name}.py").write_text(APP_SOURCE.format(here=str(directory), url=url, lease=lease))
    return AppModule(directory, name, url)


@pytest.fixture
def appmod(tmp_path: Path) -> AppModule:
    return write_app(tmp_path, f"sqlite:///{tmp_path}/firesafe.db")


@pytest.fixture
def inprocess_app(appmod: AppModule, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppModule]:
    """The app module importable by name from the current directory, as `firesafe enqueue` sees it."""
    monkeypatch.chdir(appmod.dir)
    monkeypatch.syspath_prepend(str(appmod.dir))
    yield appmod
    sys.modules.pop(appmod.name, None)


def cli_env(directory: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(directory), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("FIRESAFE_STORE", None)
    env.update(extra)
    return env


def run_cli(args: list[str], directory: Path, timeout: float = 30.0, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "firesafe", *args], cwd=directory, env=cli_env(directory, **env),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def start_cli(args: list[str], directory: Path, log: Path) -> subprocess.Popen[bytes]:
    """Start `python -m firesafe ...` with stdout and stderr going to ``log`` (read it while it runs)."""
    out = open(log, "wb")  # noqa: SIM115 - closed by the child's exit; the test reads the file
    try:
        return subprocess.Popen([sys.executable, "-m", "firesafe", *args], cwd=directory, env=cli_env(directory),
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        out.close()


def wait_for(predicate: Callable[[], object], timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
