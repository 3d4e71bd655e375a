"""Rules of the suite that a reviewer would otherwise have to remember: no assert that cannot fail.

An assert whose expression names nothing but standard-library modules and builtins (``assert math.isfinite(0.0)``,
``assert os.sep``) tests nothing the project wrote: it passes whatever the code does."""

from __future__ import annotations

import ast
import builtins
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _constant_asserts(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    stdlib: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            stdlib |= {(a.asname or a.name).split(".")[0] for a in node.names
                       if a.name.split(".")[0] in sys.stdlib_module_names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in sys.stdlib_module_names:
            stdlib |= {a.asname or a.name for a in node.names}
    allowed = stdlib | set(dir(builtins))
    return [f"{path.name}:{node.lineno}: assert {ast.unparse(node.test)}"
            for node in ast.walk(tree) if isinstance(node, ast.Assert)
            and {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)} <= allowed]


def test_no_assert_is_constant() -> None:
    found = [hit for path in sorted(TESTS.rglob("*.py")) for hit in _constant_asserts(path)]
    assert found == []


def test_the_rule_finds_constant_asserts(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text("import math\nimport os\n\ndef test(x):\n    assert math.isfinite(0.0)\n    assert os.sep\n"
                      "    assert math.isfinite(x)\n    assert len([1]) == 1\n")
    hits = _constant_asserts(sample)
    assert [h.split(": ", 1)[1] for h in hits] == ["assert math.isfinite(0.0)", "assert os.sep",
                                                  "assert len([1]) == 1"]
