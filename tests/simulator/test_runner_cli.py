from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucluster.cli.main import app
from gpucluster.simulator.traces.alibaba_online import OpenbSkipped, load_openb_jobs

from .conftest import REPO

runner = CliRunner()
CLUSTER = REPO / "src" / "gpucluster" / "data" / "philly-500.yaml"


def test_simulate_synthetic_json_has_the_promised_keys() -> None:
    res = runner.invoke(app, ["simulate", "--cluster", str(CLUSTER), "--trace", "synthetic:300", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    for key in ("jobs", "jobs_completed", "avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_queue_s", "makespan_s",
                "gpu_utilization", "jain_fairness", "bytes_moved", "preemptions", "jobs_lost"):
        assert key in data
    assert data["jobs"] == 300 and data["jobs_completed"] == 300 and data["jobs_lost"] == 0
    assert 0 < data["gpu_utilization"] <= 1


def test_simulate_jobs_file_writes_csv_and_plots(tmp_path: Path) -> None:
    f = tmp_path / "jobs.csv"
    f.write_text("id,submit_s,gpus,duration_s,tenant\na,0,8,3600,t1\nb,5,16,60,t2\nc,9,1,10,t1\n")
    out = tmp_path / "out"
    res = runner.invoke(app, ["simulate", "--cluster", str(CLUSTER), "--trace", f"jobs:{f}", "--policy",
                              "fifo,default", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert set(data["policies"]) == {"fifo", "default"}
    assert (out / "jobs-fifo.csv").read_text().count("\n") == 4
    for png in ("jct-cdf.png", "series-fifo.png", "series-default.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"


def test_bad_input_exits_2_naming_where(tmp_path: Path) -> None:
    f = tmp_path / "jobs.csv"
    f.write_text("id,submit_s,gpus,duration_s\na,0,eight,10\n")
    res = runner.invoke(app, ["simulate", "--cluster", str(CLUSTER), "--trace", f"jobs:{f}"])
    assert res.exit_code == 2
    assert "jobs.csv:2: gpus: not a number" in res.output
    res = runner.invoke(app, ["simulate", "--trace", "nope:x"])
    assert res.exit_code == 2 and "unknown format" in res.output
    res = runner.invoke(app, ["simulate", "--trace", "synthetic:5", "--policy", "lifo"])
    assert res.exit_code == 2 and "--queue-policy: unknown queue policy 'lifo'" in res.output
    res = runner.invoke(app, ["simulate", "--trace", "synthetic:5", "--placement-policy", "roundrobin"])
    assert res.exit_code == 2 and "--placement-policy: unknown placement policy 'roundrobin'" in res.output


def test_policy_all_runs_every_policy_offers_included() -> None:
    res = runner.invoke(app, ["simulate", "--cluster", str(CLUSTER), "--trace", "synthetic:40:philly:0.1", "--policy", "all",
                              "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)["policies"]
    assert set(data) == {"fifo", "sjf", "tiresias", "drf", "offers", "gavel", "default"}
    assert all(d["jobs_completed"] == 40 and d["jobs_lost"] == 0 for d in data.values())
    assert data["offers"]["offers_accepted"] > 0 and data["fifo"]["offers_accepted"] == 0


SMALL = """
apiVersion: gpucluster.io/v1alpha1
kind: ClusterSpec
name: small
nodePools:
  - {name: a, count: 2, cpuMilli: 64000, memoryMiB: 262144, gpu: {model: A100, count: 4, memoryMiB: 40960}}
"""


def test_quota_file_enforces_limits_and_drf_reclaims(tmp_path: Path) -> None:
    cluster = tmp_path / "small.yaml"
    cluster.write_text(SMALL)
    jobs = tmp_path / "jobs.csv"
    # the borrower fills all 8 GPUs first; the guaranteed tenant's jobs arrive while they run
    jobs.write_text("id,submit_s,gpus,duration_s,tenant\n"
                    "b1,0,4,36000,borrower\nb2,1,4,36000,borrower\ng1,100,4,600,owner\ncap,200,8,60,capped\n")
    quota = tmp_path / "quota.yaml"
    quota.write_text("queues:\n"
                     "  - {name: owner, guarantee: 4}\n"
                     "  - {name: borrower, guarantee: 0, weight: 1}\n"
                     "  - {name: capped, limit: {gpu: 4}}\n")
    base = ["simulate", "--cluster", str(cluster), "--trace", f"jobs:{jobs}", "--json"]
    res = runner.invoke(app, [*base, "--policy", "drf,fifo", "--quota", str(quota)])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)["policies"]
    # the 8-GPU job of a queue capped at 4 GPUs can never run: rejected on arrival, not lost
    assert all(d["jobs_lost"] == 0 and d["jobs_completed"] == 3 for d in data.values())
    assert data["drf"]["reclaims"] >= 1 and data["fifo"]["reclaims"] == 0
    # without the tree nobody reclaims and the capped job runs
    plain = json.loads(runner.invoke(app, [*base, "--policy", "drf"]).stdout)
    assert plain["reclaims"] == 0 and plain["jobs_completed"] == 4


def test_bad_quota_file_exits_2_saying_where(tmp_path: Path) -> None:
    """Each error names the file's line (not only the queue's index in the list) and the field."""
    quota = tmp_path / "q.yaml"
    for text, why in (
            ("queues:\n  - {name: a}\n  - {name: b, guarantee: -1}\n", "q.yaml:3: queues[1].guarantee: "),
            ("queues:\n  - name: a\n    limit:\n      gpu: 1\n      gpus: 1\n", "q.yaml:5: queues[0].limit.gpus: key"),
            ("queues:\n  - name: a\n\n    parent: nope\n", "q.yaml:4: queues[0].parent: unknown parent 'nope'"),
            ("queues:\n  - {name: a}\n  - {name: b, parent: c}\n  - {name: c, parent: b}\n",
             "q.yaml:3: queues[1].parent: parent cycle (b -> c -> b)"),
            ("queues:\n  - {name: a}\n  -\n    name: a\n", "q.yaml:4: queues[1].name: queue 'a' is already defined on line 2"),
            ("queues:\n  - {name: a}\n  - {weight: 2}\n", "q.yaml:3: queues[1].name: Field required"),
            ("", "q.yaml:1: an empty file"),
            ("[1, 2", "not valid YAML")):
        quota.write_text(text)
        res = runner.invoke(app, ["simulate", "--trace", "synthetic:5:philly:0.001", "--quota", str(quota)])
        assert res.exit_code == 2, res.output
        assert why in res.output, res.output
        assert "Traceback" not in res.output


@pytest.mark.parametrize("placement", ["binpack", "fgd", "default"])
def test_online_placement_replay_of_openb_lists(tmp_path: Path, placement: str) -> None:
    """``simulate --placement-policy`` on an openb node list (``--cluster x.csv``) and pods with creation and
    deletion times: every pod is placed or refused, none lost, and the run says which placement it used."""
    from tests.simulator import openb_synth

    nodes = openb_synth.write_nodes(tmp_path / "nodes.csv", 40, seed=2)
    pods = openb_synth.write_pods(tmp_path / "pods.csv", 300, seed=2, gpuspec=0.1, horizon_s=20_000.0)
    res = runner.invoke(app, ["simulate", "--cluster", str(nodes), "--trace", f"alibaba-openb:{pods}",
                              "--placement-policy", placement, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["placement_policy"] == placement and out["jobs_lost"] == 0
    assert out["jobs_completed"] + out["jobs_rejected"] == out["jobs"] > 200  # CPU-only pods are not jobs
    assert 0 < out["gpu_utilization"] <= 1


@pytest.mark.parametrize("command", ["simulate", "whatif"])
def test_the_pods_an_openb_replay_leaves_out_are_counted_on_stderr(tmp_path: Path, command: str) -> None:
    """CPU-only pods and pods that never ran are not jobs (by design), but leaving them out silently made a list
    of 4 pods a run of 2 jobs with nothing saying why; stdout stays the JSON document alone."""
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
                    "gpu-a,1000,1024,1,1000,0,100\ncpu-b,1000,1024,0,0,5,50\ngpu-c,1000,1024,1,500,10,400\n"
                    "gone-d,1000,1024,1,1000,20,20\n")
    design = tmp_path / "design.yaml"
    design.write_text("name: d\ngpu: H100\nservers: 2\n")
    args = ["simulate"] if command == "simulate" else ["whatif", "--design", str(design)]
    res = runner.invoke(app, [*args, "--trace", f"alibaba-openb:{pods}", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert (data["jobs"] if command == "simulate" else data["workload"]["jobs"]) == 2
    assert (f"note: {pods}: left out 1 CPU-only pods (num_gpu 0) and 1 that never ran (deletion_time <= "
            "creation_time); 2 GPU pods are the jobs") in " ".join(res.stderr.split())



def test_an_openb_pod_without_a_deletion_time_runs_until_the_trace_ends(tmp_path: Path) -> None:
    """An empty ``deletion_time``: the pod was still there when the trace ended, so it runs until the trace's end
    (the latest time in the file, here a deletion at 1,000 s), said on stderr; one created at the end never ran.
    On main before this test such a pod was counted as never ran and left out of the replay."""
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time\n"
                    "done-a,1000,1024,1,1000,0,1000,0\nopen-b,1000,1024,1,1000,400,,400\n"
                    "late-c,1000,1024,1,1000,1000,,\n")
    skipped = OpenbSkipped()
    jobs = load_openb_jobs(pods, skipped)
    assert [(j.job_id, j.submit_s, j.duration_s) for j in jobs] == [("done-a", 0.0, 1000.0), ("open-b", 400.0, 600.0)]
    assert (skipped.ran_to_end, skipped.never_ran, skipped.end_s) == (1, 1, 1000.0)
    res = runner.invoke(app, ["simulate", "--trace", f"alibaba-openb:{pods}", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["jobs"] == 2
    assert (f"note: {pods}: 1 GPU pods have no deletion_time (still there when the trace ended): they run until "
            "the trace's end, t=1,000 s") in " ".join(res.stderr.split())

MIXED = """apiVersion: gpucluster.io/v1alpha1
kind: ClusterSpec
name: h100-l40s
nodePools:
  - {name: h100, count: 2, cpuMilli: 128000, memoryMiB: 1048576, gpu: {model: H100-SXM5-80GB, count: 8, memoryMiB: 81920}}
  - {name: l40s, count: 2, cpuMilli: 64000, memoryMiB: 524288, gpu: {model: L40S-48GB, count: 8, memoryMiB: 49152}}
"""


def test_simulate_shows_the_placement_in_use_and_the_training_share_per_model(tmp_path: Path) -> None:
    spec = tmp_path / "mixed.yaml"
    spec.write_text(MIXED)
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("id,submit_s,gpus,duration_s,tenant,ref_gpu\na,0,8,3600,t1,H100\nb,5,8,60,t2,H100\n")
    args = ["simulate", "--cluster", str(spec), "--trace", f"jobs:{jobs}", "--policy", "fifo",
            "--placement-policy", "default"]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["placement_policy"] == "default" and data["placement_in_use"] == "speed-fgd"
    assert data["training_share_by_model"] == {"H100-SXM5-80GB": 1.0, "L40S-48GB": 0.0}
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    assert "speed-fgd" in text.stdout and "training on H100-SXM5-80GB" in text.stdout
    blind = json.loads(runner.invoke(app, [*args[:-1], "stranding-fgd", "--json"]).stdout)
    assert blind["placement_in_use"] == "stranding-fgd" and blind["training_share_by_model"]["L40S-48GB"] > 0
