"""Small builders shared by tests: nodes, pods and states without YAML."""

from __future__ import annotations

from gpucluster.model import ClusterState, ContainerRequest, DeviceRequest, DeviceSpec, NodeSpec, Pod, Policy


def gpu_node(
    name: str,
    gpus: int = 4,
    memory_mib: int = 16000,
    model: str = "A100",
    vendor: str = "nvidia",
    cpu_milli: int = 64000,
    host_mib: int = 262144,
    max_tasks: int = 10,
    nvlink: int = 0,
    leaf: str = "leaf-0",
) -> NodeSpec:
    return NodeSpec(
        name=name,
        cpu_milli=cpu_milli,
        memory_mib=host_mib,
        devices=tuple(
            DeviceSpec(
                uuid=f"{name}-gpu{j}", index=j, vendor=vendor, model=model, memory_mib=memory_mib,
                max_tasks=max_tasks, nvlink_domain=(j // nvlink) if nvlink else -1,
            )
            for j in range(gpus)
        ),
        leaf=leaf,
    )


def gpu_pod(
    name: str,
    count: int = 1,
    memory_mib: int = 0,
    memory_pct: int | None = None,
    cores_pct: int = 0,
    cpu_milli: int = 1000,
    host_mib: int = 1024,
    vendor: str = "nvidia",
    node_policy: Policy | None = None,
    gpu_policy: Policy | None = None,
    **kw: object,
) -> Pod:
    devices = (
        (DeviceRequest(vendor, count, memory_mib=memory_mib, memory_pct=memory_pct, core_milli=cores_pct * 10),)
        if count
        else ()
    )
    return Pod(
        name=name,
        containers=(ContainerRequest("main", cpu_milli, host_mib, devices),),
        node_policy=node_policy,
        gpu_policy=gpu_policy,
        **kw,  # type: ignore[arg-type]
    )


def state_of(*nodes: NodeSpec) -> ClusterState:
    return ClusterState(list(nodes))
