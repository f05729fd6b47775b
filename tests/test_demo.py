"""`make demo` runs the scripted story end to end; the demo checks its own claims and exits 1 if one fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_demo_tells_its_story_and_exits_zero(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "demo", "--dir", str(tmp_path / "demo-data"), "--pace", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "The story held" in out and "demo failed" not in out
    assert "6. Summary" in out and "jobs by state: 1 dead, 2 succeeded" in out
    assert "IdempotencyConflict" in out
    assert "replayed ['receipt:A-1001']" in out
    assert (tmp_path / "demo-data" / "demo.db").exists()
