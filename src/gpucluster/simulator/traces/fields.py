"""The parsing edge every trace loader shares: numbers through the one bounded parser
(``gpucluster.devices.quantity``), NaN and infinity refused, and undecodable files reported as a
:class:`~gpucluster.simulator.traces.TraceError` (``FILE:LINE: column: why``) instead of a traceback."""

from __future__ import annotations

import contextlib
import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucluster.devices.quantity import finite_number, whole_number
from gpucluster.inputfile import InputFileError
from gpucluster.model.limits import MAX_TRACE_SECONDS, MAX_WHOLE_NUMBER
from gpucluster.simulator.traces import TraceError


def whole(raw: object, where: str, column: str, upper: int = MAX_WHOLE_NUMBER,
          error: type[ValueError] = TraceError) -> int:
    """A non-negative whole number within ``upper`` (``"8"``, ``"8.0"``, ``8``); ``error`` is raised otherwise."""
    try:
        finite_number(raw, -math.inf)  # junk says "not a number", NaN and infinity "must be a finite number"
        return whole_number(raw.strip() if isinstance(raw, str) else raw, upper)
    except ValueError as exc:
        raise error(f"{where}: {column}: {exc}") from None


def seconds(raw: object, where: str, column: str, lower: float = 0.0) -> float:
    """A finite time or duration within ``lower..MAX_TRACE_SECONDS``."""
    try:
        return finite_number(raw, lower, MAX_TRACE_SECONDS)
    except ValueError as exc:
        raise TraceError(f"{where}: {column}: {exc}") from None


def amount(raw: object, where: str, column: str, upper: float) -> float:
    """A finite non-negative amount within ``upper`` (``tokens``)."""
    try:
        return finite_number(raw, 0.0, upper)
    except ValueError as exc:
        raise TraceError(f"{where}: {column}: {exc}") from None


@dataclass(slots=True)
class Reading:
    """What :func:`decoded` knows of the read under way: the loader sets :attr:`reader` to its ``csv`` reader."""

    reader: Any = None
    """The ``csv.reader``/``csv.DictReader`` reading the file: a CSV error names the line it stopped at."""


@contextlib.contextmanager
def decoded(path: Path, error: type[ValueError] = TraceError) -> Iterator[Reading]:
    """Turn a file that is not UTF-8 text (or not a readable regular file, :mod:`gpucluster.inputfile`) into a
    TraceError naming the file and why (and the line, for a CSV error, where the loader set ``reader``)."""
    reading = Reading()
    try:
        yield reading
    except UnicodeDecodeError as exc:
        raise error(f"{path}: byte {exc.start}: not UTF-8 text") from None
    except InputFileError as exc:
        raise error(str(exc)) from None
    except csv.Error as exc:  # a field longer than the csv module reads, a NUL ...
        inner = getattr(reading.reader, "reader", reading.reader)  # a DictReader counts only the rows it returned
        line = int(getattr(inner, "line_num", 0) or 0)
        raise error(f"{path}{f':{line}' if line else ''}: not a readable CSV file: {exc}") from None


__all__ = ["Reading", "amount", "decoded", "seconds", "whole"]
