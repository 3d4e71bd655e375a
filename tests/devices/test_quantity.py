"""The one bounded parser for quantities and numbers from outside (issue 14, defects 1-3 and 9)."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpucluster.devices import DeviceInputError, VendorRegistry
from gpucluster.devices.quantity import cpu_milli, finite_number, memory_mib, parse_quantity, whole_number
from gpucluster.model.limits import (
    MAX_CPU_MILLI,
    MAX_DEVICE_MEMORY_MIB,
    MAX_DEVICES_PER_REQUEST,
    MAX_MEMORY_MIB,
    MAX_WHOLE_NUMBER,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("16Gi", 16 * 2**30), ("500m", Decimal("0.5")), ("1.5", Decimal("1.5")), ("1G", 10**9), ("4k", 4000),
    ("1e3", 1000), (".5", Decimal("0.5")), (2, 2), (0.25, Decimal("0.25")), ("0e-999999", 0), (" 3 ", 3),
])
def test_quantities_parse(text: object, expected: object) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("bomb", ["1e300000", "1e999999", "1e-300000", "9e31", "1e-31", 10**40, "1e309"])
def test_exponent_bombs_are_refused_before_any_arithmetic(bomb: object) -> None:
    with pytest.raises(ValueError, match="out of range"):
        parse_quantity(bomb)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), "nan", "inf", "Infinity", "NaN", True,
                                 "1.2.3", "", "e5", "5Q", "-1", "x" * 10_000])
def test_nan_inf_and_junk_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_quantity(bad)


def test_every_unit_has_an_upper_bound() -> None:
    assert cpu_milli("65536") == MAX_CPU_MILLI
    with pytest.raises(ValueError, match="at most"):
        cpu_milli("1e30")
    with pytest.raises(ValueError, match="at most"):
        cpu_milli("65537")
    assert memory_mib("1Pi") == MAX_MEMORY_MIB
    with pytest.raises(ValueError, match="at most"):
        memory_mib("2Pi")
    with pytest.raises(ValueError, match="at most"):
        whole_number(10**20)
    with pytest.raises(ValueError, match="at most"):
        whole_number("1e22")
    with pytest.raises(ValueError, match="out of range"):
        whole_number("1e309")
    with pytest.raises(ValueError, match="finite"):
        whole_number(float("nan"))
    with pytest.raises(ValueError, match="must be an integer"):
        whole_number("1.5")
    assert whole_number("4k") == 4000
    assert whole_number(7.0) == 7
    with pytest.raises(ValueError, match="finite"):
        finite_number("nan")
    with pytest.raises(ValueError, match="finite"):
        finite_number("1e400", upper=1e10)  # float("1e400") is inf
    with pytest.raises(ValueError, match="at most"):
        finite_number("1e300", upper=1e10)
    assert finite_number(" 3600 ") == 3600.0


@given(st.text(max_size=80))
def test_any_text_is_a_bounded_number_or_a_value_error(text: str) -> None:
    try:
        value = parse_quantity(text)
    except ValueError:
        return
    assert value.is_finite() and value >= 0
    assert value < Decimal(10) ** 50


@given(st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30)))
def test_whole_number_stays_within_its_bound(value: object) -> None:
    try:
        n = whole_number(value, 1000)
    except ValueError:
        return
    assert isinstance(n, int) and 0 <= n <= 1000


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_finite_number_never_returns_nan_or_inf(value: float) -> None:
    try:
        out = finite_number(value, lower=-1e300)
    except ValueError:
        assert not math.isfinite(value) or value < -1e300
        return
    assert math.isfinite(out)


def _limits(**limits: object) -> dict[str, object]:
    return {"kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}


@pytest.mark.parametrize(("limits", "why"), [
    ({"nvidia.com/gpu": 100000000000000000000}, "at most 128"),  # defect 1
    ({"nvidia.com/gpu": "1e309"}, "out of range"),  # defect 2
    ({"nvidia.com/gpu": "1e22"}, "at most 128"),
    ({"nvidia.com/gpu": "1e300000"}, "out of range"),  # defect 3
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 10**30}, "must be at most"),
    ({"cpu": "1e30"}, "at most"),
    ({"cpu": "1e999999"}, "out of range"),
    ({"memory": "1e300000"}, "out of range"),
    ({"nvidia.com/gpu": float("nan")}, "finite"),
])
def test_pod_parsing_refuses_out_of_range_resources(limits: dict[str, object], why: str) -> None:
    with pytest.raises(DeviceInputError, match=why):
        VendorRegistry.from_settings().parse_pod(_limits(**limits), "pod.yaml")


def test_pod_parsing_accepts_the_bounds_themselves() -> None:
    pod = VendorRegistry.from_settings().parse_pod(
        _limits(**{"nvidia.com/gpu": MAX_DEVICES_PER_REQUEST, "nvidia.com/gpumem": MAX_DEVICE_MEMORY_MIB}), "p")
    assert pod.device_count == MAX_DEVICES_PER_REQUEST
    with pytest.raises(DeviceInputError, match=r"spec\.priority"):
        VendorRegistry.from_settings().parse_pod({**_limits(), "spec": {"priority": "1e309", "containers": [{}]}},
                                                 "p")
    assert whole_number(MAX_WHOLE_NUMBER) == MAX_WHOLE_NUMBER


# ---------------------------------------------------------------------------------------------- rounding (issue 31)
_MEMORY_SUFFIXES = ("", "k", "M", "G", "Ki", "Mi", "Gi", "m")


@pytest.mark.parametrize(("text", "mib"), [
    ("1M", 1),  # 1,000,000 bytes: less than a MiB, still one MiB, never 0
    ("1", 1), ("1Mi", 1), ("1025Ki", 2), ("1048577", 2), ("1500M", 1431), ("0.5Gi", 512), ("0", 0),
])
def test_memory_is_rounded_up_to_whole_mib(text: str, mib: int) -> None:
    assert memory_mib(text) == mib


@pytest.mark.parametrize(("text", "milli"), [
    ("1m", 1), ("0.0001", 1), ("1.0001", 1001), ("2.5", 2500), ("0.1234", 124), ("0", 0),
])
def test_cpu_is_rounded_up_to_whole_millicores(text: str, milli: int) -> None:
    assert cpu_milli(text) == milli


@given(st.integers(0, 10**7), st.integers(0, 3), st.sampled_from(_MEMORY_SUFFIXES))
def test_memory_and_cpu_are_never_rounded_down(mantissa: int, decimals: int, suffix: str) -> None:
    """What a pod is given covers what it asked for, and by less than one unit more: ``ceil``, never ``int``."""
    text = f"{Decimal(mantissa).scaleb(-decimals)}{suffix}"
    exact = parse_quantity(text)
    try:
        mib = memory_mib(text)
    except ValueError:
        assert exact / 2**20 > MAX_MEMORY_MIB
    else:
        assert mib * 2**20 >= exact > (mib - 1) * 2**20
    if suffix in ("", "k", "m"):
        try:
            milli = cpu_milli(text)
        except ValueError:
            assert exact * 1000 > MAX_CPU_MILLI
        else:
            assert milli >= exact * 1000 > milli - 1
