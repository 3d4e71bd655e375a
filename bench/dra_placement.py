"""Placement quality of ResourceClaims: kube-scheduler's DynamicResources plugin vs gpucluster's secondary scheduler,
the same pending claims on identical clusters (issue 27).

One real kube-apiserver (``scripts/k8s-control-plane.sh``, the version of ``scripts/test-deps.sh``), two identical
node sets of ``--nodes`` fake nodes with ``--gpus`` GPUs each, published by a test DRA driver the way HAMi's DRA
driver does (each GPU shared by several claims: consumable ``cores`` 100 and ``memory`` 80 Gi). The pending set:
pods with GPUs from the Alibaba trace (``openb_pod_list_*.csv``, the FGD paper's), sampled in trace order until
they ask for ``--load`` x the GPUs of one set: a whole-GPU pod (``num_gpu`` n) -> a claim for n devices taking
all of each; a shared one (``gpu_milli`` m) -> one device, ``cores`` m/10 and memory m/1000 x 80 Gi. Every claim
and pod is created at once for each set: set ``ks`` for kube-scheduler (default profile: NodeResourcesFit
LeastAllocated, DRA's allocator takes the first devices that fit), set ``gc`` for ``gpucluster k8s scheduler``
(``--placement-policy``, default ``default`` = stranding-aware FGD). When neither binds anything for
``--quiet`` seconds, the claims are read back.

Reported per scheduler: claims (and GPUs) placed, and **GPUs left unallocatable**: the free GPU capacity (in
GPUs: free cores / 100) that no claim shape of the workload can use any more (FGD's fragmentation: a shared
GPU whose free share is smaller than every shared shape that fits its memory, plus fully free GPUs on nodes
with too few of them for every whole-GPU shape when no single-GPU shape exists ...; computed by trying every
distinct shape of the workload on every node). Fewer is better.

    .venv/bin/python bench/dra_placement.py [--nodes 16] [--gpus 8] [--load 1.3] [--trace PATH] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TRACE = Path("/work/shared/traces/alibaba-gpu-v2023/openb_pod_list_default.csv")
DRIVER = "hami.dra.test"
GPU_GIB = 80


def shapes(trace: Path, gpus: int, load: float) -> list[tuple[int, int]]:
    """``(count, milli)`` of the trace's GPU pods in order, until ``load`` x ``gpus`` GPUs are asked for."""
    from gpucluster.simulator.traces.openb import load_pods

    out: list[tuple[int, int]] = []
    total = 0.0
    for p in load_pods(trace):
        if p.num_gpu <= 0:
            continue
        milli = 1000 if p.num_gpu > 1 else min(p.gpu_milli, 1000)
        out.append((p.num_gpu, milli))
        total += p.num_gpu * milli / 1000
        if total >= load * gpus:
            break
    return out


def device(node: str, j: int) -> dict[str, Any]:
    return {"name": f"gpu-{j}", "allowMultipleAllocations": True,
            "attributes": {"uuid": {"string": f"{node}-gpu-{j}"}, "productName": {"string": "NVIDIA A100 80GB"}},
            "capacity": {"memory": {"value": f"{GPU_GIB}Gi"}, "cores": {"value": "100"}}}


def claim_body(name: str, count: int, milli: int) -> dict[str, Any]:
    mem = GPU_GIB * 1024 * milli // 1000
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "bench-gpu", "allocationMode": "ExactCount", "count": count,
                "capacity": {"requests": {"cores": str(milli // 10), "memory": f"{mem}Mi"}}}}]}}}


def pod_body(name: str, scheduler: str, run: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": scheduler, "nodeSelector": {"gpucluster.io/run": run},
                     "terminationGracePeriodSeconds": 0, "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                     "containers": [{"name": "main", "image": "busybox", "resources": {
                         "claims": [{"name": "gpu"}], "requests": {"cpu": "100m", "memory": "128Mi"}}}]}}


def unallocatable(free: dict[str, list[tuple[int, int]]], workload: list[tuple[int, int]]) -> float:
    """Free GPU capacity (in GPUs) on which no shape of ``workload`` fits. ``free``: node -> per GPU (free cores %,
    free memory MiB)."""
    distinct = sorted(set(workload))
    stranded = 0.0
    for gpus in free.values():
        usable = [False] * len(gpus)
        for count, milli in distinct:
            cores = milli // 10
            mem = GPU_GIB * 1024 * milli // 1000
            fits = [j for j, (c, m) in enumerate(gpus) if c >= cores and m >= mem]
            if len(fits) >= count:
                for j in fits:
                    usable[j] = True
        stranded += sum(c / 100 for (c, _m), ok in zip(gpus, usable, strict=True) if not ok)
    return stranded


def measure(claims: list[dict[str, Any]], nodes: list[str], gpus: int) -> dict[str, Any]:
    free = {n: [(100, GPU_GIB * 1024) for _ in range(gpus)] for n in nodes}
    placed = placed_gpus = 0
    for c in claims:
        alloc = (c.get("status") or {}).get("allocation")
        if not alloc:
            continue
        placed += 1
        for r in alloc["devices"]["results"]:
            node = r["pool"]
            j = int(r["device"].split("-")[-1])
            cons = r.get("consumedCapacity") or {}
            cores = int(cons.get("cores", 100))
            mem = math.ceil(float(_bytes(cons.get("memory", f"{GPU_GIB}Gi"))) / (1 << 20))
            c0, m0 = free[node][j]
            free[node][j] = (c0 - cores, m0 - mem)
            placed_gpus += cores / 100
    whole_free = sum(1 for g in free.values() for c, _ in g if c == 100)
    partial = sum(1 for g in free.values() for c, _ in g if 0 < c < 100)
    return {"claims_placed": placed, "gpus_placed": round(placed_gpus, 2), "gpus_free_whole": whole_free,
            "gpus_partly_used": partial, "free": free}


def _bytes(q: str) -> float:
    from gpucluster.devices.quantity import parse_quantity

    return float(parse_quantity(q))


def run(args: argparse.Namespace) -> dict[str, Any]:
    from kubernetes import client

    from gpucluster.kubernetes.client import api_client

    workload = shapes(Path(args.trace), args.nodes * args.gpus, args.load)
    d = Path(tempfile.mkdtemp(prefix="gpucluster-bench-dra-"))
    env = dict(os.environ)
    cp = str(REPO / "scripts/k8s-control-plane.sh")
    subprocess.run([cp, "up", str(d)], check=True, capture_output=True, env=env, timeout=300)
    ours: subprocess.Popen[bytes] | None = None
    try:
        api = api_client(d / "kubeconfig")
        core: Any = client.CoreV1Api(api)
        res: Any = client.ResourceV1Api(api)
        res.create_device_class({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                 "metadata": {"name": "bench-gpu"},
                                 "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
        sets = {"ks": "default-scheduler", "gc": "gpucluster"}
        nodes = {run: [f"{run}-{i:03d}" for i in range(args.nodes)] for run in sets}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for run, names in nodes.items():
            for n in names:
                core.create_node({"metadata": {"name": n, "labels": {"gpucluster.io/run": run,
                                                                     "kubernetes.io/hostname": n}}})
                alloc = {"cpu": "256", "memory": "2Ti", "pods": "500"}
                core.patch_node_status(n, {"status": {"capacity": alloc, "allocatable": alloc, "conditions": [
                    {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake",
                     "lastHeartbeatTime": now, "lastTransitionTime": now}]}})
                res.create_resource_slice({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                                           "metadata": {"name": n},
                                           "spec": {"driver": DRIVER, "nodeName": n,
                                                    "pool": {"name": n, "generation": 1, "resourceSliceCount": 1},
                                                    "devices": [device(n, j) for j in range(args.gpus)]}})
        cfg = d / "ks.yaml"
        cfg.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
                       "profiles:\n- schedulerName: default-scheduler\n")
        subprocess.run([cp, "scheduler", str(d), str(cfg), "ks"], check=True, capture_output=True, env=env,
                       timeout=120)
        ours = subprocess.Popen([sys.executable, "-m", "gpucluster.cli.main", "k8s", "scheduler", "--kubeconfig",
                                 str(d / "kubeconfig"), "--no-leader-elect", "--claim-settle", "0",
                                 "--placement-policy", args.placement_policy],
                                stdout=open(d / "gpucluster.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
        deadline = time.monotonic() + 300
        while "running as" not in (d / "gpucluster.log").read_text(errors="replace"):  # synced, passes running
            if ours.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gpucluster k8s scheduler did not start:\n{(d / 'gpucluster.log').read_text()}")
            time.sleep(0.5)
        for run, sched in sets.items():
            core.create_namespace({"metadata": {"name": run}})
            items = [(f"c{i:05d}", count, milli) for i, (count, milli) in enumerate(workload)]
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda it, run=run: res.create_namespaced_resource_claim(
                    run, claim_body(it[0], it[1], it[2])), items))
                list(pool.map(lambda it, run=run, sched=sched: core.create_namespaced_pod(
                    run, pod_body(it[0], sched, run)), items))
        last, quiet_since = -1, time.monotonic()
        while time.monotonic() - quiet_since < args.quiet:
            bound = sum(1 for run in sets for p in json.loads(core.list_namespaced_pod(
                run, _preload_content=False).data)["items"] if p["spec"].get("nodeName"))
            if bound != last:
                last, quiet_since = bound, time.monotonic()
            time.sleep(1.0)
        out: dict[str, Any] = {"nodes": args.nodes, "gpus_per_node": args.gpus, "claims": len(workload),
                               "gpus_asked": round(sum(c * m / 1000 for c, m in workload), 2),
                               "placement_policy": args.placement_policy, "trace": Path(args.trace).name}
        for run in sets:
            claims = json.loads(res.list_namespaced_resource_claim(run, _preload_content=False).data)["items"]
            m = measure(claims, nodes[run], args.gpus)
            m["gpus_unallocatable"] = round(unallocatable(m.pop("free"), workload), 2)
            out["kube-scheduler" if run == "ks" else "gpucluster"] = m
        server = client.VersionApi(api).get_code()
        out["kubernetes"] = str(server.git_version)
        return out
    finally:
        if ours is not None:
            ours.terminate()
            try:
                ours.wait(30)
            except subprocess.TimeoutExpired:
                ours.kill()
                ours.wait(10)
        subprocess.run([cp, "down", str(d)], check=False, capture_output=True, env=env, timeout=120)
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=16, help="nodes per set (default 16)")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per node (default 8)")
    ap.add_argument("--load", type=float, default=1.3, help="GPUs asked for / GPUs of one set (default 1.3)")
    ap.add_argument("--trace", default=str(TRACE), help="an openb_pod_list_*.csv of the Alibaba trace")
    ap.add_argument("--placement-policy", default="default", help="our profile (default: default)")
    ap.add_argument("--quiet", type=float, default=30.0, help="seconds without a new binding that end the run")
    ap.add_argument("--json", type=Path, help="write the figures here too")
    args = ap.parse_args()
    if args.nodes < 1 or args.gpus < 1 or args.load <= 0:
        ap.error("--nodes, --gpus and --load must be positive")
    out = run(args)
    load = os.getloadavg()[0]
    out["machine"] = f"{platform.machine()}, {os.cpu_count()} cores, load average {load:.1f}"
    rows = [("", "kube-scheduler", "gpucluster")]
    for key in ("claims_placed", "gpus_placed", "gpus_free_whole", "gpus_partly_used", "gpus_unallocatable"):
        rows.append((key, str(out["kube-scheduler"][key]), str(out["gpucluster"][key])))
    print(f"{out['claims']} claims asking {out['gpus_asked']} GPUs on {args.nodes} x {args.gpus} GPUs "
          f"({out['kubernetes']}, {out['trace']}):")
    for r in rows:
        print(f"  {r[0]:<20} {r[1]:>15} {r[2]:>12}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
