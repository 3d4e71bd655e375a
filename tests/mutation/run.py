"""``make mutation``: break one line of the product at a time and check that the tests named for it notice.

The mutants are a curated list (``tests/mutation/mutants.yaml``), each: an ``id``, the issue item it ``covers``,
one or more edits (``file``, the ``original`` lines, which must occur exactly once in the file, and their
``replacement``) and the ``tests`` (pytest node ids or paths) that must fail while it is applied. Snippets are
written without their indentation: the original is looked for at every indentation, must be found at exactly one
place, and the replacement is indented as the original was found.

The tree is copied once to a temporary directory (tracked and untracked, not ignored files: what ``git ls-files
-co --exclude-standard`` lists); each mutant is applied to that copy, its tests run there with ``PYTHONPATH``
pointing at the copy's ``src``, and the file is restored. The working tree is never written to. Before the first
mutant, every listed test is run once on the unmutated copy: a test that fails there would "kill" anything.

Verdicts, one line per mutant: ``killed`` (a listed test failed, or the run timed out), ``SURVIVED`` (every listed
test passed), ``ERROR`` (an original snippet was not found, or found more than once: the code moved and the list
must follow it; or pytest could not collect the tests). The last line is ``N/M mutants killed``. Exit status 0
only when every mutant was killed.

    python -m tests.mutation.run                    # all sections
    python -m tests.mutation.run --section engine   # only the mutants that target the job engine's files
    python -m tests.mutation.run --only cache-forget-on-failed-bind --only extender-locks
    python -m tests.mutation.run --check            # only check that every snippet applies (seconds)
    python -m tests.mutation.run -j 2               # two copies, two mutants at a time
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
MUTANTS = Path(__file__).resolve().with_name("mutants.yaml")
DEFAULT_TIMEOUT_S = 600.0


class MutantError(ValueError):
    """A mutant that cannot be applied (its snippet moved) or a malformed entry in the list."""


@dataclass(frozen=True, slots=True)
class Edit:
    file: str
    original: str
    replacement: str


@dataclass(frozen=True, slots=True)
class Mutant:
    id: str
    section: str
    covers: str
    edits: tuple[Edit, ...]
    tests: tuple[str, ...]
    note: str = ""


@dataclass(slots=True)
class Result:
    mutant: Mutant
    verdict: str
    """``killed``, ``SURVIVED`` or ``ERROR``."""
    detail: str = ""
    seconds: float = 0.0
    output: str = field(default="", repr=False)


# ---------------------------------------------------------------------------------------------- the list
def _text(entry: dict[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str):
        raise MutantError(f"{where}: {key!r} must be a string")
    return value


def load(path: Path = MUTANTS) -> list[Mutant]:
    """The mutants of every section, in file order. Raises :class:`MutantError` on a malformed entry."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or not isinstance(doc.get("sections"), dict):
        raise MutantError(f"{path}: needs a 'sections' mapping")
    out: list[Mutant] = []
    seen: set[str] = set()
    for section, body in doc["sections"].items():
        entries = body.get("mutants") if isinstance(body, dict) else None
        if not isinstance(entries, list):
            raise MutantError(f"{path}: section {section!r} needs a 'mutants' list")
        for k, entry in enumerate(entries):
            where = f"{path.name}: {section}[{k}]"
            if not isinstance(entry, dict):
                raise MutantError(f"{where}: must be a mapping")
            mid = _text(entry, "id", where)
            where = f"{path.name}: {section}/{mid}"
            if mid in seen:
                raise MutantError(f"{where}: id used twice")
            seen.add(mid)
            raw_edits = entry.get("edits") or [entry]
            edits = tuple(Edit(_text(e, "file", where), _text(e, "original", where), _text(e, "replacement", where))
                          for e in raw_edits)
            for e in edits:
                if e.original == e.replacement:
                    raise MutantError(f"{where}: replacement equals the original")
            tests = entry.get("tests")
            if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
                raise MutantError(f"{where}: 'tests' must be a non-empty list of pytest node ids")
            out.append(Mutant(mid, str(section), str(entry.get("covers", "")), edits, tuple(tests),
                              str(entry.get("note", ""))))
    return out


# ---------------------------------------------------------------------------------------------- the copy
def copy_tree(src: Path, dest: Path) -> Path:
    """Copy the files git would consider part of the tree (tracked, and untracked but not ignored)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=src, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        s = src / rel
        if not s.is_file():
            continue  # deleted in the work tree but still tracked
        d = dest / rel
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(s, d)
    return dest


def _drop_bytecode(path: Path) -> None:
    """A pyc compiled from the mutated text must not outlive it (same size and second would reuse it)."""
    cache = path.parent / "__pycache__"
    if cache.is_dir():
        for pyc in cache.glob(f"{path.stem}.*.pyc"):
            pyc.unlink(missing_ok=True)


def locate(text: str, original: str, replacement: str) -> tuple[str, str] | str:
    """``(original, replacement)`` as they are indented in ``text`` (whole lines from their start), or why the
    original is not there exactly once."""
    base, repl = textwrap.dedent(original), textwrap.dedent(replacement)
    if not base.strip():
        return "original snippet is empty"
    lined = "\n" + text
    hits = []
    for k in range(41):
        pad = " " * k
        here = textwrap.indent(base, pad)
        n = lined.count("\n" + here)
        if n:
            hits.append((n, "\n" + here, "\n" + textwrap.indent(repl, pad)))
    if len(hits) == 1 and hits[0][0] == 1:
        return hits[0][1], hits[0][2]
    first = base.strip().splitlines()[0]
    found = sum(n for n, _, _ in hits)
    return f"original snippet {'not found' if not found else f'found {found} times'} (first line: {first!r})"


def apply(root: Path, mutant: Mutant) -> dict[Path, str]:
    """Apply every edit of ``mutant`` under ``root``; returns the original texts to :func:`restore`. Raises
    :class:`MutantError` (nothing left changed) when a snippet is missing or ambiguous."""
    saved: dict[Path, str] = {}
    try:
        for e in mutant.edits:
            path = root / e.file
            if not path.is_file():
                raise MutantError(f"{e.file}: no such file")
            text = path.read_text(encoding="utf-8")
            saved.setdefault(path, text)
            where = locate(text, e.original, e.replacement)
            if isinstance(where, str):
                raise MutantError(f"{e.file}: {where}")
            mutated = ("\n" + text).replace(*where)[1:]
            if path.suffix == ".py":
                try:
                    compile(mutated, str(path), "exec")
                except SyntaxError as exc:
                    raise MutantError(f"{e.file}: the mutated file does not compile: {exc}") from None
            path.write_text(mutated, encoding="utf-8")
            _drop_bytecode(path)
    except BaseException:
        restore(saved)
        raise
    return saved


def restore(saved: dict[Path, str]) -> None:
    for path, text in saved.items():
        path.write_text(text, encoding="utf-8")
        _drop_bytecode(path)


def child_env(root: Path) -> dict[str, str]:
    """The tests' environment in the copy: its ``src`` first on the path, CI rules (fail, never skip, on a
    missing service; derandomized hypothesis without its example database)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(root)])
    env["CI"] = "1"
    env["GPUCLUSTER_MUTATION"] = "1"
    return env


def run_tests(root: Path, tests: Sequence[str], timeout: float) -> tuple[int | None, str]:
    """``(pytest exit status or None on timeout, last lines of its output)``."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header",
           "-o", "console_output_style=classic", *tests]
    try:
        proc = subprocess.run(cmd, cwd=root, env=child_env(root), capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(errors="replace")
        return None, out[-4000:]
    out = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
    return proc.returncode, out[-4000:]


def _summary_line(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if any(w in ln for w in (" passed", " failed", " error", "no tests ran")):
            return ln.strip("= ")
    return lines[-1] if lines else ""


def _first_failure(output: str) -> str:
    for ln in output.splitlines():
        if ln.startswith(("FAILED ", "ERROR ")):
            return ln.split(" - ")[0].split(" ", 1)[1]
    return ""


def judge(mutant: Mutant, root: Path, timeout: float) -> Result:
    t0 = time.perf_counter()
    try:
        saved = apply(root, mutant)
    except MutantError as exc:
        return Result(mutant, "ERROR", str(exc), time.perf_counter() - t0)
    try:
        rc, out = run_tests(root, mutant.tests, timeout)
    finally:
        restore(saved)
    took = time.perf_counter() - t0
    if rc is None:
        return Result(mutant, "killed", f"timed out after {timeout:g} s", took, out)
    if rc == 1:
        return Result(mutant, "killed", f"{_first_failure(out) or 'a test'} failed", took, out)
    if rc == 0:
        return Result(mutant, "SURVIVED", _summary_line(out), took, out)
    why = {2: "pytest was interrupted (collection error: a test id is wrong or the mutant does not import)",
           5: "no tests collected (a test id is wrong)"}.get(rc, f"pytest exit status {rc}")
    return Result(mutant, "ERROR", f"{why}: {_summary_line(out)}", took, out)


# ---------------------------------------------------------------------------------------------- main
def _line(r: Result, width: int) -> str:
    return f"{r.verdict:<9} {r.mutant.section:<7} {r.mutant.id:<{width}} {r.seconds:6.1f}s  {r.detail}"


def _select(mutants: list[Mutant], sections: Iterable[str], only: Iterable[str]) -> list[Mutant]:
    sections, only = set(sections), set(only)
    unknown = only - {m.id for m in mutants}
    if unknown:
        raise MutantError(f"--only: no mutant named {', '.join(sorted(unknown))}")
    return [m for m in mutants if (not sections or m.section in sections) and (not only or m.id in only)]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.mutation.run", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", type=Path, default=MUTANTS, help="the list of mutants (default: %(default)s)")
    ap.add_argument("--section", action="append", default=[], help="run only this section (repeatable)")
    ap.add_argument("--only", action="append", default=[], metavar="ID", help="run only this mutant (repeatable)")
    ap.add_argument("--check", action="store_true", help="only check that every mutant applies to the tree")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--no-baseline", action="store_true", help="skip the run of every listed test on the "
                                                                "unmutated copy")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="mutants judged at a time, each in its own copy")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per mutant's test run")
    ap.add_argument("--json", type=Path, help="also write the results to this JSON file")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the end of each mutant's test output")
    ap.add_argument("--repo", type=Path, default=REPO, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        chosen = _select(load(args.file), args.section, args.only)
    except MutantError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not chosen:
        print("error: no mutant selected", file=sys.stderr)
        return 2
    width = max(len(m.id) for m in chosen)
    if args.list:
        for m in chosen:
            files = ", ".join(sorted({e.file for e in m.edits}))
            print(f"{m.section:<7} {m.id:<{width}} [{m.covers}] {files}")
        return 0
    jobs = max(1, args.jobs)
    with tempfile.TemporaryDirectory(prefix="gpucluster-mutation-") as tmp:
        roots = [copy_tree(args.repo, Path(tmp) / f"tree{k}") for k in range(jobs if not args.check else 1)]
        if args.check:
            bad = 0
            for m in chosen:
                try:
                    restore(apply(roots[0], m))
                    print(f"{'ok':<9} {m.section:<7} {m.id}")
                except MutantError as exc:
                    bad += 1
                    print(f"{'ERROR':<9} {m.section:<7} {m.id:<{width}} {exc}")
            print(f"{len(chosen) - bad}/{len(chosen)} mutants apply")
            return 1 if bad else 0
        if not args.no_baseline:
            tests = sorted({t for m in chosen for t in m.tests})
            print(f"baseline: {len(tests)} test ids on the unmutated tree ...", flush=True)
            rc, out = run_tests(roots[0], tests, args.timeout * 2)
            if rc != 0:
                print(out, file=sys.stderr)
                print(f"error: the listed tests do not pass on the unmutated tree ({_summary_line(out)}); "
                      "no mutant can be judged", file=sys.stderr)
                return 2
            print(f"baseline: {_summary_line(out)}", flush=True)
        free: list[Path] = list(roots)
        lock = threading.Lock()
        results: list[Result] = []

        def work(m: Mutant) -> Result:
            with lock:
                root = free.pop()
            try:
                r = judge(m, root, args.timeout)
            finally:
                with lock:
                    free.append(root)
            with lock:
                print(_line(r, width), flush=True)
                if args.verbose:
                    print("    " + r.output[-2500:].replace("\n", "\n    "), flush=True)
            return r

        with cf.ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(work, chosen))
    killed = sum(r.verdict == "killed" for r in results)
    survived = [r for r in results if r.verdict == "SURVIVED"]
    errors = [r for r in results if r.verdict == "ERROR"]
    for r in survived:
        print(f"\nSURVIVED {r.mutant.section}/{r.mutant.id} ({r.mutant.covers}): {r.mutant.note}\n"
              f"  tests: {' '.join(r.mutant.tests)}\n  {r.detail}")
    if args.json:
        args.json.write_text(json.dumps([{"id": r.mutant.id, "section": r.mutant.section, "covers": r.mutant.covers,
                                          "verdict": r.verdict, "detail": r.detail, "seconds": round(r.seconds, 1)}
                                         for r in results], indent=2))
    by_section: dict[str, list[int]] = {}
    for r in results:
        s = by_section.setdefault(r.mutant.section, [0, 0])
        s[0] += r.verdict == "killed"
        s[1] += 1
    print("\n" + ", ".join(f"{sec}: {k}/{n} killed" for sec, (k, n) in by_section.items())
          + f"; {len(survived)} survived, {len(errors)} errors")
    print(f"{killed}/{len(results)} mutants killed")
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
