"""openb trace loader: every CSV variant, and file:line errors for malformed input."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster.simulator.traces import TraceError
from gpucluster.simulator.traces.openb import load_nodes, load_pods, pod_arrays, to_node_specs, to_pod

FULL_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_nodes_load(tmp_path: Path) -> None:
    p = _write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\na,64000,262144,2,P100\nb,32000,131072,0,\n")
    nodes = load_nodes(p)
    assert [(n.name, n.gpus, n.model) for n in nodes] == [("a", 2, "P100"), ("b", 0, "")]
    specs = to_node_specs(nodes)
    assert specs[0].gpu_count == 2 and specs[0].devices[1].model == "P100" and specs[1].gpu_count == 0


def test_full_pod_file_with_gpu_spec_lists(tmp_path: Path) -> None:
    p = _write(tmp_path, "p.csv", FULL_HEADER + "\n"
               "p0,12000,16384,1,1000,,LS,Running,0,1,0\n"
               "p1,6000,12288,1,460,V100M16|V100M32,LS,Running,0,1,0\n"
               "p2,4000,8192,0,0,G2,BE,Running,0,1,0\n"
               "p3,88000,327680,8,1000,|G2||G3,LS,Running,0,1,0\n")
    pods = load_pods(p)
    assert pods[1].gpu_spec == ("V100M16", "V100M32") and pods[1].gpu_milli == 460
    assert pods[2].num_gpu == 0 and pods[2].gpu_spec == ()  # CPU-only pods ignore gpu_spec
    assert pods[3].gpu_spec == ("G2", "G3") and pods[3].total_gpu_milli == 8000
    assert pods[1].shape == (6000, 460, 1, "V100M16|V100M32")
    model = to_pod(pods[1])
    assert model.constraints.use_types == ("V100M16", "V100M32")
    assert model.device_requests[0][1].core_milli == 460
    arr = pod_arrays(pods)
    assert arr.milli.tolist() == [1000, 460, 0, 1000]


def test_five_column_multigpu_file(tmp_path: Path) -> None:
    p = _write(tmp_path, "m.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,12000,16384,2,1000\np1,0,0,1,1500\n")
    pods = load_pods(p)
    assert pods[0].gpu_spec == () and pods[0].total_gpu_milli == 2000
    assert pods[1].gpu_milli == 1000  # clamped to one whole GPU
    assert pods[1].score_cpu_milli == 100  # kube-scheduler's non-zero default when scoring


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("p0,abc,1,0,0", ":2: column 'cpu_milli': not a number: 'abc'"),
        ("p0,1.5,1,0,0", ":2: column 'cpu_milli': must be an integer, got '1.5'"),
        ("p0,-1,1,0,0", ":2: column 'cpu_milli': must not be negative, got -1"),
        ("p0,nan,1,0,0", ":2: column 'cpu_milli': must be a finite number, got 'nan'"),
        ("p0,1e22,1,0,0", ":2: column 'cpu_milli': must be at most 2,147,483,647, got '1e22'"),
        ("p0,1,1,0,", ":2: column 'gpu_milli' is empty"),
        ("p0,1,1,2,500", ":2: pod p0 asks for 2 GPUs; multi-GPU pods need gpu_milli 1000"),
        ("p0,1,1,1,0", ":2: pod p0 asks for 1 GPU(s) with gpu_milli 0"),
        ("p0,1,1,0,0,extra", ":2: 6 fields, header has 5"),
        ("p0,1,1", ":2: too few fields"),
        ("p0,1,1,0,0\np0,1,1,0,0", ":3: pod 'p0' already defined on line 2"),
    ],
)
def test_pod_errors_name_file_and_line(tmp_path: Path, body: str, why: str) -> None:
    p = _write(tmp_path, "bad.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + body + "\n")
    with pytest.raises(TraceError) as err:
        load_pods(p)
    assert str(err.value).startswith(str(p)) and why in str(err.value)


def test_header_and_empty_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"n.csv:1: header lacks column\(s\) model"):
        load_nodes(_write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu\na,1,1,1\n"))
    with pytest.raises(TraceError, match=r":2: node a has 2 GPUs but no model"):
        load_nodes(_write(tmp_path, "n2.csv", "sn,cpu_milli,memory_mib,gpu,model\na,1,1,2,\n"))
    with pytest.raises(TraceError, match=r"e.csv:1: empty file"):
        load_pods(_write(tmp_path, "e.csv", ""))
    with pytest.raises(TraceError, match=r"h.csv:1: no pods"):
        load_pods(_write(tmp_path, "h.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"))
    with pytest.raises(TraceError, match=r"missing.csv: no such file"):
        load_pods(tmp_path / "missing.csv")


TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "alibaba-gpu-v2023"


def test_real_trace_counts() -> None:
    if not (TRACES / "openb_pod_list_default.csv").is_file():
        pytest.skip("openb trace not available")
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    assert len(nodes) == 1213 and sum(n.gpus for n in nodes) == 6212
    pods = load_pods(TRACES / "openb_pod_list_default.csv")
    kinds = {"cpu": 0, "share": 0, "one": 0}
    for p in pods:
        if p.num_gpu == 0:
            kinds["cpu"] += 1
        elif p.gpu_milli < 1000:
            kinds["share"] += 1
        elif p.num_gpu == 1:
            kinds["one"] += 1
    assert len(pods) == 8152 and kinds == {"cpu": 1088, "share": 3078, "one": 3911}
    for name in ("multigpu20", "gpuspec25", "gpushare100", "cpu200"):
        assert load_pods(TRACES / f"openb_pod_list_{name}.csv")
