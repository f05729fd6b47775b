"""Run an example as its README says (``python -m examples.NAME``) in a subprocess; each example's test
checks the outcome the README promises by reading the example's store and logs itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str, data: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FIRESAFE_", "FAKE_"))}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", f"examples.{name}", "--dir", str(data), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"examples.{name} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc
