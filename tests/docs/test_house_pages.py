"""The pages that describe the house stay true to it.

- The benchmarks page is a short page for users: the current figures and how to reproduce them; the
  dated measurements live beside the benchmark code (bench/HISTORY.md).
- ``make bench-peers`` rewrites only its table in that page and appends its run to the history.
- The architecture page is in the site and names only files that exist; ARCHITECTURE.md points to it.
- The README's links resolve, and reach the architecture.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
NAME = "firesafe_bench_peers_run"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def peers_run() -> ModuleType:
    """bench/peers/run.py as a module (bench/ is not a package; the module imports only the stdlib)."""
    if NAME in sys.modules:
        return sys.modules[NAME]
    spec = importlib.util.spec_from_file_location(NAME, ROOT / "bench" / "peers" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module  # its dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def local_links(page: Path) -> list[str]:
    return [m for m in LINK.findall(page.read_text()) if not m.startswith(("http://", "https://", "mailto:"))]


def test_the_benchmarks_page_is_short_and_its_history_lives_beside_the_code() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    run = peers_run()
    assert len(page.splitlines()) <= 250, "docs/benchmarks.md is for users: move dated notes to bench/HISTORY.md"
    assert page.count(run.BEGIN) == 1 and page.count(run.END) == 1
    history = (ROOT / "bench" / "HISTORY.md").read_text()
    assert run.HISTORY_SECTION in history and run.BEGIN not in history
    # Every script and make target the page tells a reader to run exists.
    scripts = set(re.findall(r"bench/[\w/]+\.(?:py|sql)", page))
    assert {"bench/throughput.py", "bench/bench_postgres.py", "bench/peers/run.py"} <= scripts
    for script in scripts:
        assert (ROOT / script).is_file(), script
    makefile = (ROOT / "Makefile").read_text()
    for target in set(re.findall(r"\bmake ([a-z][\w-]*)", page)):
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"make {target}"


def test_bench_peers_rewrites_only_its_table_and_appends_its_run_to_the_history(tmp_path: Path) -> None:
    run = peers_run()
    page, history = tmp_path / "benchmarks.md", tmp_path / "HISTORY.md"
    around = ("# Benchmarks\n\nHow to reproduce.\n\n", "\n\n## Reading the figures\n\nNo-op jobs.\n")
    page.write_text(f"{around[0]}{run.BEGIN}\nthe table of 2026-12-03\n{run.END}{around[1]}")
    kept = "# Benchmark history\n\n## Notes\n\nA dated note.\n"
    history.write_text(kept)

    run.write_docs("the table of 2026-12-04", page)
    run.append_history("the table of 2026-12-04\n", "2026-12-04 09:00 UTC, `make bench-peers`", history)
    run.write_docs("the table of 2026-12-05", page)
    run.append_history("the table of 2026-12-05", "2026-12-05 09:00 UTC, `make bench-peers`", history)

    assert page.read_text() == f"{around[0]}{run.BEGIN}\nthe table of 2026-12-05\n{run.END}{around[1]}"
    text = history.read_text()
    assert text.startswith(kept)
    assert text[len(kept):] == (
        f"\n{run.HISTORY_SECTION}\n\nAppended by `bench/peers/run.py`, oldest first.\n"
        "\n### 2026-12-04 09:00 UTC, `make bench-peers`\n\nthe table of 2026-12-04\n"
        "\n### 2026-12-05 09:00 UTC, `make bench-peers`\n\nthe table of 2026-12-05\n")


def test_the_architecture_page_is_in_the_site_and_names_files_that_exist() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^\s+- Architecture: architecture\.md$", nav, re.M)
    page = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:firesafe|tests)/[\w/.-]*)`", page))
    assert {"firesafe/store/base.py", "firesafe/worker/worker.py", "tests/contract/"} <= named
    for path in named:
        assert (ROOT / path).exists(), f"docs/architecture.md names {path}, which does not exist"
    assert page.count("```text") == 1, "one picture"
    assert "docs/architecture.md" in local_links(ROOT / "ARCHITECTURE.md")


def test_the_readme_links_resolve_and_reach_the_architecture() -> None:
    for name in ("README.md", "ARCHITECTURE.md"):
        links = local_links(ROOT / name)
        for link in links:
            assert (ROOT / link).exists(), f"{name} links to {link}, which does not exist"
    readme = local_links(ROOT / "README.md")
    assert {"ARCHITECTURE.md", "docs/architecture.md", "docs/benchmarks.md"} <= set(readme)
