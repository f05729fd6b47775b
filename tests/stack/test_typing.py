"""A declared job is typed by its function: mypy checks the arguments of ``enqueue``, ``enqueue_async``
and ``options(...).enqueue`` as it checks a direct call (``typing_cases.py`` holds the cases).

Given the cases file, when mypy checks it with ``--warn-unused-ignores``, then it passes: every correct
call is accepted and every wrong call raises the error its ignore names. Given a wrong call left
unsilenced, mypy fails and names the argument.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).with_name("typing_cases.py")


def mypy(path: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--warn-unused-ignores",
                           "--show-error-codes", "--cache-dir", str(cache), str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)


def test_the_typing_cases_pass_mypy_with_every_ignore_used(tmp_path: Path) -> None:
    proc = mypy(CASES, tmp_path / "cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_wrong_argument_fails_mypy_and_names_it(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_call.py"
    wrong.write_text(
        "from typing import Any\n"
        "from firesafe import App\n"
        "app = App('sqlite:///unused.db')\n"
        "@app.job\n"
        "def refund(ctx: Any, refund_id: str, amount_cents: int) -> None: ...\n"
        "refund.options(key='refund:r-1').enqueue('r-1', '500')\n"
        "refund.enqueue('r-1', '500')\n"
        "refund.enqueue('r-1', 500, key='refund:r-1', colour='red')\n"
    )
    proc = mypy(wrong, tmp_path / "cache")
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert ('wrong_call.py:6: error: Argument 2 to "enqueue" of "Enqueuer" has incompatible type "str"; '
            'expected "int"  [arg-type]') in out
    assert ('wrong_call.py:7: error: No overload variant of "enqueue" of "JobDef" matches argument types '
            '"str", "str"') in out
    assert "def enqueue(self, refund_id: str, amount_cents: int) -> Job" in out  # the note shows what it takes
    # With options as keywords the arguments go unchecked (typing cannot add them beside P): no error.
    assert "wrong_call.py:8" not in out
