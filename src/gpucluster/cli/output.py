"""How the CLI writes what it reports: machine formats byte for byte, tables that fit the terminal.

Two rules, whatever the terminal:

- **Machine formats** (``--json``, ``-o json|yaml``, ``--raw``) are written straight to stdout: no wrapping, no
  colour, no markup, nothing that depends on ``COLUMNS`` or on stdout being a terminal. What one command writes,
  another program parses back.
- **Tables** are plain text in kubectl's manner (upper-case headers, columns separated by three spaces, no
  borders, no colour). On a terminal (or with ``COLUMNS`` set) a table that is too wide is narrowed by
  truncating its widest cells with ``…``; a column is never dropped. Piped elsewhere, nothing is truncated.
"""

from __future__ import annotations

import enum
import json
import math
import os
import re
import shutil
import sys
from collections.abc import Iterable, Sequence
from typing import Any

ELLIPSIS = "…"
SEPARATOR = "   "
MIN_COLUMN = 5
"""A truncated column keeps at least this many characters (or its full width when narrower)."""
LAST_COLUMN = 12
"""The last column (free text) is cut down to this many characters before any other column is cut."""
WRAPPED_COLUMN = 20
"""A folded last column (``wrap_last``) is at least this wide: the columns before it give way first."""


class OutputFormat(enum.StrEnum):
    """``-o``: a table (``wide`` adds columns), or the API's answer as JSON or YAML."""

    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"

    @property
    def machine(self) -> bool:
        return self in (OutputFormat.JSON, OutputFormat.YAML)


def write(text: str) -> None:
    """Write ``text`` to stdout as is (a newline is added when it lacks one)."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def _finite(data: Any) -> Any:
    """NaN and infinities (not JSON) as null."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(v) for v in data]
    return data


def json_text(data: Any, compact: bool = False) -> str:
    """Strict JSON (a NaN or an infinity is written as null)."""
    kw: dict[str, Any] = {"separators": (",", ":")} if compact else {"indent": 2}
    try:
        return json.dumps(data, default=str, allow_nan=False, **kw)
    except ValueError:
        return json.dumps(_finite(json.loads(json.dumps(data, default=str))), default=str, allow_nan=False, **kw)


def yaml_text(data: Any) -> str:
    """YAML without line folding (PyYAML folds long strings at 80 characters by default)."""
    import yaml  # here, not at the top: completing a command's arguments imports this module (issue 32)

    text: str = yaml.safe_dump(_plain(data), sort_keys=False, allow_unicode=True, width=2**31 - 1,
                               default_flow_style=False)
    return text


def _plain(data: Any) -> Any:
    """JSON-shaped data with only the types ``safe_dump`` knows (what ``json.dumps(default=str)`` would give)."""
    return json.loads(json_text(data))


def write_json(data: Any, compact: bool = False) -> None:
    write(json_text(data, compact))


def write_yaml(data: Any) -> None:
    write(yaml_text(data))


def write_machine(data: Any, fmt: OutputFormat) -> None:
    if fmt == OutputFormat.YAML:
        write_yaml(data)
    else:
        write_json(data)


def terminal_width() -> int | None:
    """The width tables are fitted to: ``COLUMNS`` when set, the terminal's width when stdout is one, else
    None (no limit: a pipe or a file gets whole cells)."""
    env = os.environ.get("COLUMNS", "")
    if env.strip().isdigit() and int(env) > 0:
        return int(env)
    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):
        tty = False
    return shutil.get_terminal_size((80, 24)).columns if tty else None


def truncate(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    return text[:width - 1] + ELLIPSIS


def fit_widths(natural: Sequence[int], limit: int | None, gap: int = len(SEPARATOR),
               elastic_last: bool = True, keep: Iterable[int] = ()) -> list[int]:
    """Column widths that fit ``limit`` characters when they can. The last column (free text: a message, a
    summary) gives way first, down to :data:`LAST_COLUMN` characters; then the widest columns are narrowed,
    none below ``min(natural, MIN_COLUMN)``; the ``keep`` columns (an id a user types next) never are. With no
    limit (or room enough) the natural widths."""
    widths = list(natural)
    if limit is None or not widths:
        return widths
    kept = set(keep)
    budget = limit - gap * (len(widths) - 1)
    if sum(widths) <= budget:
        return widths
    last = len(widths) - 1
    if elastic_last and len(widths) > 1 and last not in kept:
        others = sum(widths[:-1])
        widths[-1] = max(min(widths[-1], LAST_COLUMN), budget - others)
        if sum(widths) <= budget:
            return widths
    floors = [w if k in kept else min(w, MIN_COLUMN) for k, w in enumerate(widths)]
    if sum(floors) >= budget:
        return floors
    lo, hi = 0, max(widths)  # the largest cap C with sum(max(floor, min(w, C))) <= budget
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(max(f, min(w, mid)) for w, f in zip(widths, floors, strict=True)) <= budget:
            lo = mid
        else:
            hi = mid - 1
    capped = [max(f, min(w, lo)) for w, f in zip(widths, floors, strict=True)]
    spare = budget - sum(capped)
    for k in sorted(range(len(widths)), key=lambda j: -widths[j]):  # hand out what is left, widest first
        if spare <= 0:
            break
        extra = min(spare, widths[k] - capped[k])
        capped[k] += extra
        spare -= extra
    return capped


def _cell(value: Any) -> str:
    if value is None:
        return "<none>"
    text = str(value)
    return " ".join(text.split()) if ("\n" in text or "\t" in text) else text


def fold(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken after a space or a comma (a message, a
    Slurm node list ``train-[0000-0003,0007],infer-0001``), never inside a word unless one word is longer
    than the whole width."""
    if len(text) <= width:
        return [text]
    lines: list[str] = []
    line = ""
    for token in re.split(r"(?<=[ ,])", text):
        if len(line) + len(token.rstrip()) > width and line.strip():
            lines.append(line.rstrip())
            line = ""
        line += token.lstrip() if not line else token
        while len(line.rstrip()) > width:  # one word longer than the column: cut it, nothing else fits
            lines.append(line[:width])
            line = line[width:]
    if line.strip():
        lines.append(line.rstrip())
    return lines or [""]


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], width: int | None = None,
                 no_headers: bool = False, right: Iterable[int] = (), wrap_last: bool = False,
                 keep: Iterable[int] = ()) -> str:
    """A kubectl-style table; ``width`` (characters) narrows the widest cells to fit, never drops a column.
    ``right`` lists the columns aligned to the right (numbers); ``keep`` the columns never cut (ids).
    ``wrap_last``: the last column's text is folded onto continuation lines under it (at spaces and commas,
    :func:`fold`) instead of being cut (for a "why" that must be read whole); the other columns give way so
    that every line fits ``width``."""
    body = [[_cell(v) for v in row] for row in rows]
    head = [str(h) for h in headers]
    for row in body:
        if len(row) != len(head):
            raise ValueError(f"row has {len(row)} cells, the table {len(head)} columns")
    shown = body if no_headers else [head, *body]
    if not shown:
        return ""
    natural = [max(len(r[k]) for r in shown) for k in range(len(head))]
    last = len(natural) - 1
    if wrap_last and width is not None:  # the last column takes whatever the others leave, at least 20
        least = min(natural[last], WRAPPED_COLUMN)
        widths = fit_widths([*natural[:last], least], width, elastic_last=False, keep={*keep, last})
        others = sum(widths[:last]) + len(SEPARATOR) * last
        widths[last] = max(least, min(natural[last], width - others))
    else:
        widths = fit_widths(natural, width, keep=keep)
    align_right = set(right)
    lines = []
    for row in shown:
        tail = [row[last]]
        if wrap_last and len(row[last]) > widths[last]:
            tail = fold(row[last], widths[last])
        for n, text_last in enumerate(tail):
            cells = []
            for k, w in enumerate(widths):
                text = text_last if k == last else (row[k] if n == 0 else "")
                cut = truncate(text, w)
                if k in align_right:
                    cells.append(cut.rjust(w))
                else:
                    cells.append(cut if k == last else cut.ljust(w))
            lines.append(SEPARATOR.join(cells).rstrip())
    return "\n".join(lines) + "\n"


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None,
                no_headers: bool = False, wide: bool = False, right: Iterable[int] = (),
                wrap_last: bool = False, keep: Iterable[int] = ()) -> None:
    """Write a table to stdout, fitted to :func:`terminal_width` (``wide``: never truncated)."""
    width = None if wide else terminal_width()
    if title:
        write(truncate(title, width) if width else title)
    text = render_table(headers, list(rows), width, no_headers, right, wrap_last, keep)
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()


__all__ = ["OutputFormat", "fit_widths", "json_text", "print_table", "render_table", "terminal_width",
           "truncate", "write", "write_json", "write_machine", "write_yaml", "yaml_text"]
