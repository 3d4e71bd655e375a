"""Bad requirements get errors that name the field."""

from __future__ import annotations

from typing import Any

import pytest

from gpucluster.design import RequirementsError, load_requirements, parse_requirements
from gpucluster.design.requirements import parse_psu


def _problems(data: Any) -> dict[str, str]:
    with pytest.raises(RequirementsError) as err:
        parse_requirements(data)
    return dict(err.value.problems)


@pytest.mark.parametrize(
    ("data", "field", "why"),
    [
        ({"gpu": "H100", "servers": -3}, "servers", "must be > 0"),
        ({"gpu": "H100", "servers": 0}, "servers", "must be > 0"),
        ({"gpu": "H100", "gpus": -8}, "gpus", "must be > 0"),
        ({"gpu": "H100", "servers": 4, "gpus_per_server": -1}, "gpus_per_server", "must be > 0"),
        ({"gpu": "X9000", "servers": 4}, "gpu", "unknown GPU model 'X9000'"),
        ({"gpu": "H100", "servers": 4, "gpus_per_server": 16}, "gpus_per_server", "at most 8"),
        ({"gpu": "H100", "servers": 4, "fabric": {"switch_ports": 63}}, "fabric.switch_ports", "even"),
        ({"gpu": "H100", "servers": 4, "fabric": {"switch_ports": 2}}, "fabric.switch_ports", ">= 4"),
        ({"gpu": "H100", "servers": 4, "fabric": {"type": "ethernet"}}, "fabric.type", "must be"),
        ({"gpu": "H100", "servers": 4, "fabric": {"oversubscription": 0.5}},
         "fabric.oversubscription", ">= 1"),
        ({"gpu": "H100", "servers": 4, "power": {"psu": "lots"}}, "power.psu", "COUNTxWATTS"),
        ({"gpu": "H100", "servers": 4, "power": {"pue": 0.8}}, "power.pue", ">= 1"),
        ({"gpu": "H100", "servers": 4, "colour": "red"}, "colour", "unknown field"),
        ({"gpu": "H100"}, "servers", "exactly one"),
        ({"gpu": "H100", "servers": 2, "gpus": 16}, "servers", "exactly one"),
        ({"servers": 2}, "gpu", "required"),
    ],
)
def test_bad_fields_are_named(data: dict[str, Any], field: str, why: str) -> None:
    problems = _problems(data)
    assert field in problems, problems
    assert why in problems[field]


def test_gpu_aliases_and_case() -> None:
    for name in ("h100", "H100-SXM5-80GB", "R4000", "l40s", "A800", "H800", "B200", "H200", "A100"):
        parse_requirements({"gpu": name, "servers": 1})


def test_psu_parsing() -> None:
    assert parse_psu("2x2200") == (2, 2200.0, 1)
    assert parse_psu("6x3300:4+2") == (6, 3300.0, 2)
    assert parse_psu("6 x 3300W") == (6, 3300.0, 3)
    with pytest.raises(ValueError, match="does not add up"):
        parse_psu("6x3300:4+1")


def test_yaml_file(tmp_path: Any) -> None:
    path = tmp_path / "req.yaml"
    path.write_text("gpu: H100\nservers: 200\nfabric: {type: roce}\n", encoding="utf-8")
    req = load_requirements(path)
    assert req.servers == 200
    assert req.fabric.type == "roce"
