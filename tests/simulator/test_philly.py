from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucluster.simulator.traces import TraceError
from gpucluster.simulator.traces.philly import load_philly


def test_loads_the_shared_trace_with_durations_from_the_throughput_table(philly_dir: Path) -> None:
    jobs = load_philly(philly_dir)
    assert len(jobs) == 11264
    assert len({j.tenant for j in jobs}) == 13
    assert min(j.duration_s for j in jobs) >= 1199
    assert sum(1 for j in jobs if j.num_gpus == 1) == 7873
    first = load_philly(philly_dir / "0e4a51.trace")[0]
    table = json.loads((philly_dir.parent / "oracle_throughputs.json").read_text())
    assert first.duration_s == pytest.approx(95121 / table["v100"]["Transformer (batch size 128)"]["null"])


def test_bad_lines_name_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "oracle_throughputs.json").write_text(json.dumps({"v100": {"A3C": {"null": 2.0}}}))
    f = tmp_path / "vc.trace"
    f.write_text("A3C\tcmd\t-n\t0\t100\t0\t1\nA3C\tcmd\t-n\t0\t100\tsoon\t1\n")
    with pytest.raises(TraceError, match=r"vc.trace:2: arrival_time_s: not a number: 'soon'"):
        load_philly(f)
    f.write_text("Unknown\tcmd\t-n\t0\t100\t0\t1\n")
    with pytest.raises(TraceError, match=r"vc.trace:1: job type 'Unknown'"):
        load_philly(f)
    f.write_text("A3C\tcmd\t-n\t0\t100\t0\t1\n")
    assert load_philly(f)[0].duration_s == 50
