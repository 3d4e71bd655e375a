"""The secondary scheduler on a real API server, a gang whose first member fits and the second does not: the
pass binds none of it, holds nothing for it (no assumption left to expire later), and the GPU the first member
had been given goes to the next pod at once.

Two nodes with one GPU each, of one model (a gang stays on one model): ``wide`` has 32 cores, ``narrow`` 16, of
which a CPU-only blocker takes 14. Both GPUs are free and whole, so the gang's capacity check passes and its first
member (4 cores) is reserved on ``wide``; the second fits neither node (``wide``'s GPU is taken, ``narrow`` has 2
cores left).

The scheduler runs in this process (its passes called by the test, so nothing depends on timing); the informer,
the Bindings, the Events and the PodScheduled conditions are the real API server's. The nodes have GPU models
unique to this run and the pods ask for those models, so nodes other tests registered do not matter.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_helpers import bound, core_api, create_pods, gpu_pod, list_pods, registry, wait_until

from gpucluster.kubernetes.register import NodeRegistrar
from gpucluster.kubernetes.runtime import RunOptions, build
from gpucluster.kubernetes.secondary import SecondaryScheduler
from gpucluster.model import DeviceSpec, NodeSpec

pytestmark = pytest.mark.integration


class Rig:
    def __init__(self, kube_client: Any, run: str) -> None:
        self.run = run
        self.name = f"pg-{run}"
        self.wide, self.narrow = f"pg-{run}-wide", f"pg-{run}-narrow"
        nodes = [
            NodeSpec(name=self.wide, cpu_milli=32000, memory_mib=65536,
                     labels={"gpucluster.io/run": run, "gpucluster.io/pool": "wide"},
                     devices=(DeviceSpec(f"GPU-{run}-w", 0, "nvidia", f"MODEL-{run}", 81920),)),
            NodeSpec(name=self.narrow, cpu_milli=16000, memory_mib=65536,
                     labels={"gpucluster.io/run": run, "gpucluster.io/pool": "narrow"},
                     devices=(DeviceSpec(f"GPU-{run}-n", 0, "nvidia", f"MODEL-{run}", 81920),)),
        ]
        self.registrar = NodeRegistrar(kube_client, nodes, registry())
        self.registrar.register()
        opts = RunOptions(scheduler_name=self.name, handshake_timeout=3600, assume_ttl=3600, sync_timeout=30)
        self.cluster, binder, self.informer = build(kube_client, registry(), opts, identity=self.name)
        self.scheduler = SecondaryScheduler(self.cluster, binder, self.name)
        self.informer.pod_listeners.append(self.scheduler.on_pod)
        self.informer.start()
        assert self.informer.wait_synced(30), "the informer did not sync"
        wait_until(lambda: {self.wide, self.narrow} <= set(self.cluster.state.node_index), 30, "both nodes")

    def pod(self, name: str, cpu: str, **kw: Any) -> dict[str, Any]:
        types = {"nvidia.com/use-gputype": f"MODEL-{self.run}"}
        out = gpu_pod(name, self.name, annotations={**types, **kw.pop("annotations", {})}, run=self.run, **kw)
        out["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
        return out

    def cpu_pod(self, name: str, cpu: str, pool: str) -> dict[str, Any]:
        out = gpu_pod(name, self.name, run=self.run)
        out["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": "16Mi"}}
        out["spec"]["nodeSelector"]["gpucluster.io/pool"] = pool
        return out

    def wait_pending(self, names: set[str]) -> None:
        wait_until(lambda: names <= {k.split("/")[1] for k in self.scheduler.pending}, 30, f"{names} pending")

    def close(self) -> None:
        self.informer.stop()
        self.registrar.delete()


@pytest.fixture
def rig(kube_client: Any) -> Iterator[Rig]:
    r = Rig(kube_client, uuid.uuid4().hex[:6])
    try:
        yield r
    finally:
        r.close()


def _held(rig: Rig, namespace: str) -> dict[str, tuple[str, bool]]:
    """Pod name -> (node, still only assumed) for every pod of ``namespace`` the scheduler holds devices for."""
    cache = rig.cluster.scheduler.cache
    return {k.split("/")[1]: (a.node, cache.is_assumed(k)) for k, a in rig.cluster.state.allocations.items()
            if k.startswith(f"{namespace}/")}


def test_a_gang_that_fits_only_in_part_binds_and_holds_nothing(kube_client: Any, rig: Rig, namespace: str) -> None:
    core = core_api(kube_client)
    # 14 of narrow's 16 cores, no GPU
    create_pods(core, namespace, [rig.cpu_pod("blocker", "14", "narrow")])
    rig.wait_pending({"blocker"})
    assert rig.scheduler.run_pass() == 1
    assert bound(list_pods(core, namespace)) == {"blocker": rig.narrow}
    # a whole GPU and 4 cores each: the first member fits wide, the second fits nowhere now
    gang = {"gpucluster.io/gang": "train", "gpucluster.io/gang-min-member": "2"}
    create_pods(core, namespace, [rig.pod(f"w{i}", "4", cores=100, mem=1000, annotations=gang) for i in range(2)])
    rig.wait_pending({"w0", "w1"})
    assert rig.scheduler.run_pass() == 0
    assert bound(list_pods(core, namespace)) == {"blocker": rig.narrow}
    assert _held(rig, namespace) == {"blocker": (rig.narrow, False)}
    assert rig.cluster.summary()["assumed"] == 0
    msgs = wait_until(lambda: (m := {p["metadata"]["name"]: c.get("message", "")
                                     for p in list_pods(core, namespace) for c in p["status"].get("conditions") or []
                                     if c["type"] == "PodScheduled" and c["status"] == "False"}) and len(m) == 2 and m,
                      30, "PodScheduled=False on both members")
    assert all("gang train: none of its 2 pods bind" in m for m in msgs.values()), msgs
    # wide's GPU is free again: a single whole-GPU pod with 3 cores binds there in the next pass
    create_pods(core, namespace, [rig.pod("after", "3", cores=100, mem=1000)])
    rig.wait_pending({"after"})
    assert rig.scheduler.run_pass() == 1
    assert bound(list_pods(core, namespace)) == {"blocker": rig.narrow, "after": rig.wide}
    assert rig.cluster.summary()["assumed"] == 0
    # room for both members (the others gone): the whole gang binds, one member per node
    core.delete_namespaced_pod("blocker", namespace, grace_period_seconds=0)
    core.delete_namespaced_pod("after", namespace, grace_period_seconds=0)
    wait_until(lambda: not _held(rig, namespace), 30, "the deleted pods to be released")
    assert rig.scheduler.run_pass() == 2
    assert bound(list_pods(core, namespace)) in ({"w0": rig.wide, "w1": rig.narrow}, {"w0": rig.narrow, "w1": rig.wide})
