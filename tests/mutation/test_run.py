"""The mutation harness on a toy repository: snippets are found at any one indentation or reported, the copy is
mutated and restored (never the tree itself), and the verdicts and the final count come out as documented."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.mutation.run import MUTANTS, Edit, Mutant, MutantError, apply, load, locate, main, restore

CODE = '''\
def fits(free: int, need: int) -> bool:
    if need <= free:
        return True
    return False


def total(xs: list[int]) -> int:
    return sum(xs)
'''
TEST = '''\
from toy import fits, total


def test_exact_fit() -> None:
    assert fits(3, 3) and not fits(3, 4)


def test_total() -> None:
    assert total([1, 2]) == 3
'''


def _mutant(original: str, replacement: str, mid: str = "m", tests: tuple[str, ...] = ("tests",)) -> Mutant:
    return Mutant(mid, "core", "", (Edit("src/toy/__init__.py", original, replacement),), tests)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src" / "toy").mkdir(parents=True)
    (root / "src" / "toy" / "__init__.py").write_text(CODE)
    (root / "tests").mkdir()
    (root / "tests" / "test_toy.py").write_text(TEST)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def test_locate_finds_whole_lines_at_one_indentation() -> None:
    text = "def f():\n    if a:\n        return 1\n    x = 1\nx = 1\n"
    assert locate(text, "if a:\n    return 1\n", "if b:\n    return 2\n") == (
        "\n    if a:\n        return 1\n", "\n    if b:\n        return 2\n")
    assert "found 2 times" in str(locate(text, "x = 1\n", "x = 2\n"))  # at two indentations: ambiguous
    assert "not found" in str(locate(text, "return 2\n", "return 3\n"))
    assert "not found" in str(locate(text, "a:\n", "b:\n"))  # only whole lines from their start


def test_apply_and_restore_leave_the_file_as_it_was(repo: Path) -> None:
    path = repo / "src" / "toy" / "__init__.py"
    saved = apply(repo, _mutant("if need <= free:\n", "if need < free:\n"))
    assert "    if need < free:\n" in path.read_text()
    restore(saved)
    assert path.read_text() == CODE
    with pytest.raises(MutantError, match="does not compile"):
        apply(repo, _mutant("if need <= free:\n", "if need <= free\n"))
    with pytest.raises(MutantError, match="not found"):
        apply(repo, _mutant("if need == free:\n", "pass\n"))
    assert path.read_text() == CODE


def test_load_refuses_malformed_lists(tmp_path: Path) -> None:
    bad = tmp_path / "m.yaml"
    entry = {"id": "a", "file": "f.py", "original": "x\n", "replacement": "y\n", "tests": ["t"]}
    for broken, why in (({**entry, "tests": []}, "tests"), ({**entry, "replacement": "x\n"}, "equals"),
                        ({k: v for k, v in entry.items() if k != "original"}, "original")):
        bad.write_text(textwrap.dedent(f"sections:\n  core:\n    mutants: [{broken!r}]\n").replace("'", '"'))
        with pytest.raises(MutantError, match=why):
            load(bad)
    bad.write_text(f"sections:\n  core:\n    mutants: [{entry!r}, {entry!r}]\n".replace("'", '"'))
    with pytest.raises(MutantError, match="id used twice"):
        load(bad)


def test_the_repository_list_loads_and_has_its_sections() -> None:
    mutants = load(MUTANTS)
    assert len(mutants) >= 40
    assert {m.section for m in mutants} == {"core", "engine", "users"}


def test_a_run_judges_each_mutant_and_counts(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listing = tmp_path / "mutants.yaml"
    listing.write_text(textwrap.dedent('''\
        sections:
          core:
            mutants:
              - id: boundary
                file: src/toy/__init__.py
                original: "if need <= free:\\n"
                replacement: "if need < free:\\n"
                tests: [tests/test_toy.py::test_exact_fit]
              - id: unseen
                file: src/toy/__init__.py
                original: "return sum(xs)\\n"
                replacement: "return sum(xs) + 0\\n"
                tests: [tests/test_toy.py]
              - id: moved
                file: src/toy/__init__.py
                original: "return max(xs)\\n"
                replacement: "return 0\\n"
                tests: [tests/test_toy.py]
        '''))
    code = main(["--file", str(listing), "--repo", str(repo), "--timeout", "120"])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    verdicts = {line.split()[2]: line.split()[0] for line in out if line.split()[:2][1:] == ["core"]}
    assert verdicts == {"boundary": "killed", "unseen": "SURVIVED", "moved": "ERROR"}
    assert out[-1] == "1/3 mutants killed"
    assert (repo / "src" / "toy" / "__init__.py").read_text() == CODE  # the tree itself was never touched
