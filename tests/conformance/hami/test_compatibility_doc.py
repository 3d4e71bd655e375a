"""Every deliberate difference a ported case asserts is explained in ``docs/hami-compatibility.md``, and every
case names a HAMi test."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import tests.conformance.hami as package
from tests.conformance.hami.harness import Case

DOC = Path(__file__).resolve().parents[3] / "docs" / "hami-compatibility.md"


def all_cases() -> list[Case]:
    out: list[Case] = []
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, list) and value and all(isinstance(v, Case) for v in value):
                out.extend(value)
    return out


def test_every_difference_is_explained() -> None:
    anchors = set(re.findall(r'<a id="([a-z0-9-]+)"></a>', DOC.read_text(encoding="utf-8")))
    cases = all_cases()
    assert len(cases) > 100
    missing = {c.hami: c.differs for c in cases if c.differs and c.differs not in anchors}
    assert missing == {}


def test_every_case_names_its_hami_test() -> None:
    bad = [c.hami for c in all_cases() if not re.match(r"^Test\w*/.+", c.hami)]
    assert bad == []
