"""Issue 32 (CLI part) without a server: what the offline commands refuse and how they read at 80 columns."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpucluster.cli.get_cmd import SINFO_HEADERS, VIEWS, Resource, sinfo_cells, sinfo_rows
from gpucluster.cli.main import app
from gpucluster.cli.output import render_table
from gpucluster.model import ContainerRequest, DeviceRequest, NodeSpec, Pod
from gpucluster.scheduler.feasibility import never_fits
from tests.cli.tty import run_tty
from tests.helpers import gpu_node, state_of

runner = CliRunner()

TYPO_POD = """apiVersion: v1
kind: Pod
metadata: {name: typo}
spec:
  containers:
  - name: c
    resources:
      limits: {nvidia.com/gpu: 1, nvidia.com/gpumemory: 8000}
"""


def test_schedule_refuses_a_resource_no_node_has(tmp_path: Path) -> None:
    """Item 1, offline: a typo is bad input (exit 2 naming the file, the pod and the field), not a pod that
    waits (exit 3)."""
    pods = tmp_path / "pods.yaml"
    pods.write_text(TYPO_POD)
    r = runner.invoke(app, ["schedule", "--pods", str(pods)])
    assert r.exit_code == 2, r.stdout
    assert f"{pods}: pod default/typo: resources.nvidia.com/gpumemory: no node has the resource" in r.stderr
    assert "did you mean nvidia.com/gpumem?" in r.stderr


def _pod(extended: dict[str, int]) -> Pod:
    return Pod(name="p", containers=(ContainerRequest("main", 1000, 1024, (DeviceRequest("nvidia", 1),),
                                                      extended=extended),))


def test_an_extended_resource_a_node_offers_is_not_refused() -> None:
    plain = gpu_node("a")
    offered = NodeSpec(name="b", cpu_milli=plain.cpu_milli, memory_mib=plain.memory_mib, devices=plain.devices,
                       leaf=plain.leaf, extended={"example.com/fpga": 2})
    state = state_of(plain, offered)
    assert never_fits([_pod({"example.com/fpga": 1})], state) is None
    found = never_fits([_pod({"example.com/fpgaa": 1})], state)
    assert found is not None and found.where == "resources.example.com/fpgaa"
    assert "did you mean example.com/fpga?" in found.why


def test_sinfo_folds_a_long_node_list_at_80_columns() -> None:
    """Item 7: the node list used to be cut ("train-[0000,0002,…"); now it is folded at its commas."""
    nodes = [{"name": f"train-{k:04d}", "pool": "train", "model": "H100-SXM5-80GB", "schedulable": k % 2 == 0,
              "gpus": 8, "pods": 0, "dev_core_used": [0] * 8, "dev_mem_pct": [0] * 8, "dev_healthy": [True] * 8}
             for k in range(60)]
    rows = sinfo_rows(nodes)
    text = render_table(SINFO_HEADERS, sinfo_cells(rows), width=80, right=(2, 5), wrap_last=True)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), text
    start = lines[0].index("NODELIST")
    folded = "".join(line[start:] for line in lines[1:])
    assert all(r["nodelist"] in folded for r in rows)  # whole, only split where a comma was


def test_schedule_never_wraps_why_not_mid_word_at_80_columns(tmp_path: Path) -> None:
    """Item 7: WHY NOT used to keep 20 columns whatever the others took, so the line passed 80 and the
    terminal broke it inside a word; now the other columns give way and the reason folds at spaces."""
    pods = tmp_path / "pods.yaml"
    pods.write_text("".join(f"""---
apiVersion: v1
kind: Pod
metadata: {{name: a-rather-long-pod-name-as-generated-by-a-job-controller-{k}}}
spec:
  containers:
  - name: c
    resources:
      limits: {{nvidia.com/gpu: 9}}
""" for k in range(2)))
    r = run_tty("schedule", "--pods", str(pods), columns=80)
    assert r.code == 3, r.stderr
    lines = r.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), r.stdout
    why = " ".join(line.split("   ")[-1].strip() for line in lines[2:-1])
    for word in ("nodes", "are", "available:"):
        assert word in why.split(), why


def test_get_queue_never_cuts_the_job_id_at_80_columns() -> None:
    """Item 7: ``get queue`` narrowed the ID column like any other ("j-5ca08…"); ids are kept whole."""
    view = VIEWS[Resource.QUEUE]
    body = {"jobs": [{"position": 1, "id": "j-5ca0850d78cf", "name": "a-long-job-name-" * 3, "tenant": "t" * 30,
                      "gpus": 4, "waiting_s": 36, "why": "waiting for GPUs " * 5, "blocked": "quota",
                      "est_wait_s": None, "priority": 0, "replicas": 1}]}
    rows = [view.row(x, body)[:len(view.headers)] for x in body["jobs"]]
    text = render_table(view.headers, rows, width=80, right=view.right, keep=view.keep)
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "j-5ca0850d78cf" in text and "blocked by quota" in text


def test_policy_flags_have_one_name_each_and_the_old_ones_warn(tmp_path: Path) -> None:
    """Item 6: ``--policy`` meant the placement policy in schedule/demo/up and the queue policy in
    simulate/whatif; ``--pods`` a file in schedule and a count in demo. Now --placement-policy / --queue-policy
    / --pod-count everywhere; the old names still work with their old meaning and warn on stderr."""
    pods = tmp_path / "pods.yaml"
    pods.write_text(TYPO_POD.replace("nvidia.com/gpumemory: 8000", "nvidia.com/gpumem: 8000"))
    new = runner.invoke(app, ["schedule", "--pods", str(pods), "--placement-policy", "binpack", "--json"])
    old = runner.invoke(app, ["schedule", "--pods", str(pods), "--policy", "binpack", "--json"])
    assert new.exit_code == old.exit_code == 0 and new.stdout == old.stdout and new.stderr == ""
    assert "--policy is deprecated here: use --placement-policy" in old.stderr
    both = runner.invoke(app, ["schedule", "--pods", str(pods), "--policy", "binpack", "--placement-policy", "spread"])
    assert both.exit_code == 2 and "give --placement-policy only" in both.stderr
    new = runner.invoke(app, ["simulate", "--trace", "synthetic:40:philly:0.01", "--queue-policy", "fifo", "--json"])
    old = runner.invoke(app, ["simulate", "--trace", "synthetic:40:philly:0.01", "--policy", "fifo", "--json"])
    assert new.exit_code == old.exit_code == 0 and "--policy is deprecated here: use --queue-policy" in old.stderr
    new = runner.invoke(app, ["demo", "--pod-count", "50", "--placement-policy", "binpack", "--json"])
    old = runner.invoke(app, ["demo", "--pods", "50", "--policy", "binpack", "--json"])
    assert new.exit_code == old.exit_code == 0
    assert [r["pods"] for r in json.loads(new.stdout)["results"]] == [50]
    assert "--pods is deprecated here: use --pod-count" in old.stderr
    for command in (["up"], ["simulate"], ["whatif"], ["schedule"], ["demo"], ["k8s", "scheduler"]):
        r = run_tty(*command, "--help", columns=80)
        assert r.code == 0 and "--policy " not in r.stdout  # the alias is hidden
        assert "--placement-policy" in r.stdout or "--queue-policy" in r.stdout, command


def test_help_at_80_columns_never_cuts_a_flag_name_and_shows_no_bool_placeholder() -> None:
    """Item 7 and the minor one: typer's rich help cut "--placement-poli…" and gave every flag "<bool>"."""
    for command in (["up"], ["get"], ["schedule"], ["simulate"], ["whatif"], ["submit"], ["tenants", "create"]):
        r = run_tty(*command, "--help", columns=80)
        assert r.code == 0, r.stderr
        assert all(len(line) <= 80 for line in r.stdout.splitlines()), r.stdout
        assert "…" not in r.stdout and "<bool>" not in r.stdout, r.stdout
    assert "--placement-policy <str>" in run_tty("up", "--help", columns=80).stdout


def test_version_as_a_flag_and_as_a_verb() -> None:
    from gpucluster import __version__

    flag, verb = runner.invoke(app, ["--version"]), runner.invoke(app, ["version"])
    assert flag.exit_code == verb.exit_code == 0 and flag.stdout == verb.stdout == f"{__version__}\n"
