"""Run `firesafe dashboard` as a real subprocess and find the port it bound."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP_MODULE = '''
from tests.dashboard.appdef import make_app, populate

app, fix = make_app({url!r})
'''


def write_app(directory: Path, url: str, name: str = "dashapp") -> str:
    (directory / f"{name}.py").write_text(APP_MODULE.format(url=url))
    return f"{name}:app"


def env_for(directory: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FIRESAFE_DASHBOARD_TOKEN", "FIRESAFE_STORE")}
    env["PYTHONPATH"] = os.pathsep.join([str(directory), str(ROOT)])
    env.update(extra)
    return env


def run(args: list[str], directory: Path, timeout: float = 30, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "firesafe", *args], cwd=directory, env=env_for(directory, **env),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@dataclass
class Running:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path


@contextmanager
def dashboard(args: list[str], directory: Path, timeout: float = 20, command: str = "dashboard",
              **env: str) -> Iterator[Running]:
    """Start `firesafe dashboard ARGS --port 0` (or another command serving HTTP, such as `serve`);
    yields once uvicorn says where it listens."""
    log = directory / f"{command}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "firesafe", command, *args, "--port", "0"],
                                cwd=directory, env=env_for(directory, **env), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while True:
            text = log.read_text(errors="replace")
            m = re.search(r"Uvicorn running on http://([^:\s]+|\[[^\]]+\]):(\d+)", text)
            if m:
                break
            if proc.poll() is not None:
                raise AssertionError(f"firesafe {command} exited with {proc.returncode}:\n{text}")
            if time.monotonic() > deadline:
                raise AssertionError(f"firesafe {command} did not start within {timeout}s:\n{text}")
            time.sleep(0.05)
        yield Running(proc, f"http://127.0.0.1:{m.group(2)}", log)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
