"""Kubernetes resource quantities (``500m``, ``2``, ``1.5``, ``16Gi``, ``1G``) in the model's units."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "": Decimal(1),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
    "m": Decimal("0.001"),
}
_RE = re.compile(r"^\s*([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_quantity(value: object) -> Decimal:
    """Parse a quantity into a plain number; raises ``ValueError`` with the reason."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _RE.match(str(value))
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"not a quantity: {value!r}")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation:
        raise ValueError(f"not a quantity: {value!r}") from None
    if number < 0:
        raise ValueError(f"must not be negative: {value!r}")
    return number * _SUFFIX[match.group(2)]


def cpu_milli(value: object) -> int:
    """CPU quantity -> millicores (rounded up, as Kubernetes does)."""
    return math.ceil(parse_quantity(value) * 1000)


def memory_mib(value: object) -> int:
    """Memory quantity in bytes -> MiB (rounded up)."""
    return math.ceil(parse_quantity(value) / (2**20))
