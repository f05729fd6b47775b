"""Parts plug in, they do not reach in (DESIGN.md, invariant 12): the worker's parts, the limiters'
gate, the app and the CLI use one another's public attributes and methods only.

Given the source of those modules, when every attribute access is read, then none names a private
attribute (``_x``) of a worker, an app, a store, a completer or a gate held by another object.
"""

from __future__ import annotations

import ast
from pathlib import Path

import firesafe

ROOT = Path(firesafe.__file__).parent
#: The modules whose parts must plug in through public attributes.
MODULES = sorted([*ROOT.glob("worker/*.py"), ROOT / "limits" / "gate.py", ROOT / "app.py", ROOT / "hooks.py",
                  *ROOT.glob("cli/*.py")])
#: The names other objects' parts go by in those modules.
PARTS = {"worker", "w", "leader", "app", "store", "completer", "gate", "limits"}


def reach_ins(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        base = node.value
        name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
        if name in PARTS:
            found.append(f"{path.name}:{node.lineno}: {name}.{node.attr}")
    return found


def test_no_part_reads_or_writes_another_parts_private_attributes() -> None:
    assert MODULES and all(p.exists() for p in MODULES)
    found = [hit for path in MODULES for hit in reach_ins(path)]
    assert found == []


def test_the_check_sees_a_reach_in(tmp_path: Path) -> None:
    module = tmp_path / "part.py"
    module.write_text("def f(self, worker):\n    worker._unsaved.append(1)\n    self.app._runner()\n"
                      "    self._ok = 1\n    self.worker.stats.deferred += 1\n")
    assert sorted(reach_ins(module)) == ["part.py:2: worker._unsaved", "part.py:3: app._runner"]
