"""Numbers from outside, parsed once and bounded: Kubernetes quantities (``500m``, ``2``, ``1.5``, ``16Gi``,
``1G``) in the model's units, whole numbers and finite reals.

This is the one parser the CLI, the REST API, Kubernetes objects and trace loaders share. It refuses, with a
``ValueError`` that says why:

* text longer than :data:`~gpucluster.model.limits.MAX_QUANTITY_CHARS` and exponents beyond
  :data:`~gpucluster.model.limits.MAX_QUANTITY_EXPONENT`, *before* any arithmetic (``"1e999999"`` costs a regular
  expression and a ``Decimal`` with a big exponent, never a million-digit integer);
* NaN and infinity (as floats or as text), booleans and negative numbers;
* anything above the caller's bound (every bound is in :mod:`gpucluster.model.limits`).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from gpucluster.model.limits import (
    MAX_CPU_MILLI,
    MAX_MEMORY_MIB,
    MAX_QUANTITY_CHARS,
    MAX_QUANTITY_EXPONENT,
    MAX_WHOLE_NUMBER,
)

_SUFFIX = {
    "": Decimal(1),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
    "m": Decimal("0.001"),
}
_RE = re.compile(r"^\s*([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")
_INT_RE = re.compile(r"^\s*[+-]?[0-9]{1,18}\s*$")
_SHOW = 40
_INT_LIMIT = 10 ** (MAX_QUANTITY_EXPONENT + 1)


def show(value: object) -> str:
    """``repr(value)`` cut to a length fit for an error message (a request may send megabytes)."""
    text = repr(value)
    return text if len(text) <= _SHOW else text[: _SHOW - 3] + "..."


def _from_float(value: float) -> Decimal:
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {show(value)}")
    return Decimal(repr(value))


def parse_quantity(value: object) -> Decimal:
    """A quantity as a plain non-negative number (``"16Gi"`` -> ``17179869184``); ``ValueError`` with the reason.

    The result is at most ``10**(MAX_QUANTITY_EXPONENT + 1) x 2**60``; callers check their own bound."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {show(value)}")
    if isinstance(value, int):
        if abs(value) >= _INT_LIMIT:
            raise ValueError(f"out of range: {show(value)}")
        number = Decimal(value)
    elif isinstance(value, float):
        number = _from_float(value)
    else:
        text = str(value)
        if len(text) > MAX_QUANTITY_CHARS:
            raise ValueError(f"not a quantity: longer than {MAX_QUANTITY_CHARS} characters")
        match = _RE.match(text)
        if not match or match.group(2) not in _SUFFIX:
            raise ValueError(f"not a quantity: {show(value)}")
        try:
            number = Decimal(match.group(1))
        except InvalidOperation:
            raise ValueError(f"not a quantity: {show(value)}") from None
        if not number.is_zero() and abs(number.adjusted()) > MAX_QUANTITY_EXPONENT:
            raise ValueError(f"out of range: {show(value)} (exponent beyond +-{MAX_QUANTITY_EXPONENT})")
        number *= _SUFFIX[match.group(2)]
    if number.is_zero():
        return Decimal(0)
    if number < 0:
        raise ValueError(f"must not be negative: {show(value)}")
    if abs(number.adjusted()) > MAX_QUANTITY_EXPONENT + 19:
        raise ValueError(f"out of range: {show(value)}")
    return number


def _bounded(number: Decimal, value: object, upper: int, unit: str) -> int:
    if number > upper:
        raise ValueError(f"must be at most {upper:,} {unit}, got {show(value)}")
    return math.ceil(number)


def cpu_milli(value: object, upper: int = MAX_CPU_MILLI) -> int:
    """CPU quantity -> millicores (rounded up, as Kubernetes does), at most ``upper``."""
    return _bounded(parse_quantity(value) * 1000, value, upper, "millicores")


def memory_mib(value: object, upper: int = MAX_MEMORY_MIB) -> int:
    """Memory quantity in bytes -> MiB (rounded up), at most ``upper`` MiB."""
    return _bounded(parse_quantity(value) / (2**20), value, upper, "MiB")


def whole_number(value: object, upper: int = MAX_WHOLE_NUMBER) -> int:
    """A non-negative integer within ``upper``: an ``int``, an integral finite ``float``, or text holding a
    whole number or a whole quantity (the API server canonicalises ``"4000"`` as ``"4k"``)."""
    if isinstance(value, bool):
        raise ValueError(f"must be an integer, got {show(value)}")
    if isinstance(value, int):
        number = value
        if number > upper:
            raise ValueError(f"must be at most {upper:,}, got {show(value)}")
    elif isinstance(value, str) and _INT_RE.match(value):
        number = int(value)
    else:
        try:
            exact = _from_float(value) if isinstance(value, float) else parse_quantity(str(value))
        except ValueError as exc:
            if "out of range" in str(exc) or "finite" in str(exc):
                raise
            raise ValueError(f"must be an integer, got {show(value)}") from None
        if exact > upper:
            raise ValueError(f"must be at most {upper:,}, got {show(value)}")
        if exact != exact.to_integral_value():
            raise ValueError(f"must be an integer, got {show(value)}")
        number = int(exact)
    if number < 0:
        raise ValueError(f"must not be negative, got {number}")
    if number > upper:
        raise ValueError(f"must be at most {upper:,}, got {show(value)}")
    return number


def finite_number(value: object, lower: float = 0.0, upper: float = math.inf) -> float:
    """A real number within ``lower..upper`` (NaN and infinity refused whatever the bounds), from a number or
    its text (``"3600"``, ``"1.5e3"``)."""
    if isinstance(value, bool):
        raise ValueError(f"not a number: {show(value)}")
    if isinstance(value, int | float):
        number = float(value)
    else:
        text = str(value).strip()
        if len(text) > MAX_QUANTITY_CHARS:
            raise ValueError(f"not a number: longer than {MAX_QUANTITY_CHARS} characters")
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"not a number: {show(value)}") from None
    if not math.isfinite(number):
        raise ValueError(f"must be a finite number, got {show(value)}")
    if number < lower:
        raise ValueError(f"must be at least {lower:g}, got {show(value)}")
    if number > upper:
        raise ValueError(f"must be at most {upper:g}, got {show(value)}")
    return number


__all__ = ["cpu_milli", "finite_number", "memory_mib", "parse_quantity", "show", "whole_number"]
