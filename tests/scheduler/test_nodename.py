"""The NodeName plugin: a pod annotated ``gpucluster.io/node-name`` goes to that node or nowhere."""

from __future__ import annotations

from dataclasses import replace

from gpucluster.model import ClusterState
from gpucluster.model.labels import NODE_NAME_ANNOTATION as NODE_NAME
from gpucluster.scheduler import Outcome, Scheduler
from gpucluster.scheduler.framework import PluginConfig, Profile
from tests.helpers import gpu_node, gpu_pod


def _sched() -> Scheduler:
    names = ("NodeName", "NodeUnschedulable", "NodeResourcesFit", "DeviceFit", "NodePolicy", "DevicePolicy")
    return Scheduler(ClusterState([gpu_node("n0"), gpu_node("n1"), gpu_node("n2")]),
                     Profile(plugins=[PluginConfig(name=n) for n in names], tie_break="first"))


def test_pinned_pod_lands_on_its_node_or_is_rejected_with_a_counted_reason() -> None:
    s = _sched()
    assert s.schedule_and_bind(gpu_pod("free", count=1)).node == "n0"  # unpinned: first best node
    pinned = gpu_pod("p", count=1)
    d = s.schedule_and_bind(replace(pinned, annotations={NODE_NAME: "n2"}))
    assert d.outcome == Outcome.SCHEDULED and d.node == "n2"
    d = s.schedule(replace(gpu_pod("q", count=1), annotations={NODE_NAME: "n9"}))
    assert d.outcome == Outcome.UNSCHEDULABLE and d.reasons == {"NodeNameMismatch": 3}
    s.state.set_schedulable("n1", False)
    d = s.schedule(replace(gpu_pod("r", count=1), annotations={NODE_NAME: "n1"}))
    assert d.reasons == {"NodeNameMismatch": 2, "NodeUnschedulable": 1}
