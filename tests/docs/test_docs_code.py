"""The docs cannot drift from the code: every page's Python blocks run, in order, in a fresh
directory, and every commented ``print`` prints what its comment says (see ``blocks.py``).

A page is run in a subprocess of its own (``python -m tests.docs.blocks PAGE``) so that the stores,
threads and files it makes go away with it. A page marked ``<!-- store: postgres -->`` runs with
``$FIRESAFE_STORE`` pointing at a schema of its own on the test server (dropped afterwards) and
``$DATABASE_URL`` at the server; it is skipped when the server is unreachable (and fails when
``FIRESAFE_REQUIRE_POSTGRES=1``, as in CI).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import PG_URL, drop_schema, need_postgres
from tests.docs.blocks import NO_RUN, blocks, runnable

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted(p for p in (ROOT / "docs").rglob("*.md") if "hooks" not in p.parts), ROOT / "README.md"]
RUNNABLE = [p for p in PAGES if runnable(p.read_text())]


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


POSTGRES_PAGE = "<!-- store: postgres -->"


def run_page(page: Path, where: Path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIRESAFE_")}
    env.update(extra_env, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "tests.docs.blocks", str(page)], cwd=where, env=env,
                          capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.parametrize("page", RUNNABLE, ids=page_id)
def test_the_page_runs_and_prints_what_it_says(page: Path, tmp_path: Path) -> None:
    if POSTGRES_PAGE not in page.read_text():
        proc = run_page(page, tmp_path)
    else:
        need_postgres()
        schema = f"fs_docs_{uuid.uuid4().hex[:12]}"
        try:
            proc = run_page(page, tmp_path, FIRESAFE_STORE=f"{PG_URL}?schema={schema}", DATABASE_URL=PG_URL)
        finally:
            drop_schema(schema)
    assert proc.returncode == 0, f"{page_id(page)} failed:\n{proc.stderr[-4000:]}"
    assert proc.stdout.rstrip().endswith(f"ran {len(runnable(page.read_text()))} block(s) of {page}")


def test_the_core_pages_have_code_that_runs() -> None:
    names = {p.name for p in RUNNABLE}
    for name in ("tour.md", "keys.md", "retries.md", "dead-letters.md", "steps.md", "schedules.md", "alerts.md",
                 "events.md", "postgres.md", "celery.md", "rq.md", "dramatiq-huey.md"):
        assert name in names, f"docs/{name} has no Python block that runs"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_run_marks_a_code_block(page: Path) -> None:
    """A ``<!-- no-run -->`` comment must sit right above a fence, or it silently marks nothing."""
    text = page.read_text()
    marked = text.count(NO_RUN)
    assert marked == sum(1 for b in blocks(text) if not b.run), f"{page_id(page)}: a {NO_RUN} is not above a block"


def test_a_wrong_comment_fails_the_page(tmp_path: Path) -> None:
    page = tmp_path / "drift.md"
    page.write_text("# Drift\n\n```python\ntotal = 1 + 1\nprint(total)   # 3\n```\n")
    proc = run_page(page, tmp_path)
    assert proc.returncode != 0
    assert f"{page}:5: the comment says '3' but it printed '2'" in proc.stderr


def test_a_failing_block_names_its_page_line(tmp_path: Path) -> None:
    page = tmp_path / "broken.md"
    page.write_text("# Broken\n\nText.\n\n```python\nx = 1\n\nraise RuntimeError('the docs are wrong')\n```\n"
                    "\n<!-- no-run -->\n```python\nnever_runs()\n```\n")
    proc = run_page(page, tmp_path)
    assert proc.returncode != 0
    assert f'File "{page}", line 8' in proc.stderr and "the docs are wrong" in proc.stderr


def test_the_api_reference_fences_doctests() -> None:
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        from griffe_doctests import ROLE, fence_doctests
    finally:
        sys.path.remove(str(ROOT / "docs" / "hooks"))
    text = "Backoff.\n\n>>> b.delay(1, 0.5)\n[1.0, 2.0]\n\nSee :class:`firesafe.App`."
    assert fence_doctests(ROLE.sub(r"\1", text)) == (
        "Backoff.\n\n```pycon\n>>> b.delay(1, 0.5)\n[1.0, 2.0]\n```\n\nSee `firesafe.App`.")


def test_the_cli_reference_has_every_commands_help() -> None:
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        from cli_help import MARKER, on_page_markdown
    finally:
        sys.path.remove(str(ROOT / "docs" / "hooks"))
    from firesafe.cli.main import cli

    page = on_page_markdown(f"# CLI\n\n{MARKER}\n", None, None, None)
    for name in cli.list_commands(None):  # type: ignore[arg-type]
        assert f"## `firesafe {name}`" in page
    assert "### `firesafe dlq replay`" in page and "Usage: firesafe dlq replay [OPTIONS]" in page
    assert MARKER not in page
