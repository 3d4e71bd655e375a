from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster.simulator.runner import Simulation
from gpucluster.simulator.traces import TraceError
from gpucluster.simulator.traces.tiresias import load_shape, load_tiresias

from .conftest import TRACES, make_cluster


def test_sixty_job_trace_runs_and_las_beats_fifo() -> None:
    path = TRACES / "tiresias-philly-derived" / "60_job.csv"
    if not path.is_file():
        pytest.skip("shared Tiresias trace not present")
    jobs = load_tiresias(path)
    assert len(jobs) == 60
    shape = load_shape(TRACES / "tiresias-philly-derived" / "n32g4.csv")
    assert shape["gpus_per_node"] == 4
    res = {}
    for policy in ("fifo", "tiresias"):
        sim = Simulation(make_cluster(nodes=4, gpus=4, domain=4), policy)
        sim.submit_many(jobs)
        sim.run()
        res[policy] = sim.summary()
        assert res[policy]["jobs_lost"] == 0
    assert res["tiresias"]["avg_jct_s"] < res["fifo"]["avg_jct_s"]


def test_missing_column_is_reported(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("job_id,num_gpu,submit_time\n1,1,0\n")
    with pytest.raises(TraceError, match=r"t.csv:1: missing column 'duration'"):
        load_tiresias(f)
