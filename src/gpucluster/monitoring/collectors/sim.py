"""A simulated device source: device metrics derived from a :class:`ClusterState` and what each pod does.

Each pod follows an :class:`ActivityProfile` (a loop of phases: how busy the SMs, tensor pipes and memory are,
how much of its device memory it touches, PCIe and NVLink traffic). A device's utilisation is the sum over the
pods sharing it of (phase activity x the pod's core share), capped at 100 %; temperature, power and clocks
follow utilisation. Faults (XIDs, ECC, NVLink errors, heat, a GPU falling off the bus) are injected per device.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gpucluster.model import Allocation, ClusterState, DeviceSpec
from gpucluster.model.labels import ACTIVITY_ANNOTATION
from gpucluster.monitoring.collectors.base import DeviceSample

"""Pod annotation naming one of :data:`PROFILES` (the simulated behaviour of the pod)."""


@dataclass(frozen=True, slots=True)
class Phase:
    """A stretch of a job's life with steady device behaviour."""

    duration_s: float
    """How long the phase lasts (``math.inf`` for forever)."""
    sm_active: float
    """Fraction of the pod's compute share kept busy, 0..1."""
    tensor_active: float = 0.0
    """Fraction of cycles the tensor pipes are busy, 0..1."""
    dram_active: float = 0.0
    """Fraction of cycles device memory is busy, 0..1."""
    memory_fraction: float = 0.9
    """Fraction of the pod's allocated device memory in use, 0..1."""
    pcie_rx_bytes_per_s: float = 0.0
    pcie_tx_bytes_per_s: float = 0.0
    nvlink_bytes_per_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("sm_active", "tensor_active", "dram_active", "memory_fraction"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"phase {name} must be within 0..1, got {v}")
        if self.duration_s <= 0:
            raise ValueError("phase duration must be > 0")


@dataclass(frozen=True, slots=True)
class ActivityProfile:
    """A pod's behaviour over time: its phases, repeated when ``loop`` (else the last phase holds)."""

    phases: tuple[Phase, ...]
    loop: bool = True

    def __post_init__(self) -> None:
        if not self.phases:
            raise ValueError("an activity profile needs at least one phase")

    def at(self, elapsed_s: float) -> Phase:
        total = sum(p.duration_s for p in self.phases)
        t = max(0.0, elapsed_s)
        if self.loop and math.isfinite(total) and total > 0:
            t = t % total
        for p in self.phases:
            if t < p.duration_s:
                return p
            t -= p.duration_s
        return self.phases[-1]


_GB = 1e9
PROFILES: Mapping[str, ActivityProfile] = {
    "compute": ActivityProfile((Phase(math.inf, 0.97, 0.65, 0.35, 0.92, 0.2 * _GB, 0.2 * _GB, 20 * _GB),)),
    "input": ActivityProfile((Phase(math.inf, 0.30, 0.15, 0.10, 0.60, 14 * _GB, 0.3 * _GB, 1 * _GB),)),
    "communication": ActivityProfile((Phase(math.inf, 0.40, 0.22, 0.15, 0.85, 11 * _GB, 11 * _GB, 2 * _GB),)),
    "memory": ActivityProfile((Phase(math.inf, 0.90, 0.05, 0.92, 0.95, 0.5 * _GB, 0.5 * _GB, 5 * _GB),)),
    "idle": ActivityProfile((Phase(math.inf, 0.01, 0.0, 0.0, 0.50),)),
    "training": ActivityProfile(
        (
            Phase(50.0, 0.97, 0.65, 0.35, 0.92, 0.3 * _GB, 0.2 * _GB, 10 * _GB),
            Phase(10.0, 0.55, 0.10, 0.25, 0.92, 2 * _GB, 2 * _GB, 150 * _GB),
        )
    ),
}
"""Canned behaviours, named by the pod annotation ``gpucluster.io/activity``."""

_TDP_W = (("H200", 700.0), ("H100", 700.0), ("H800", 700.0), ("A100", 400.0), ("A800", 400.0),
          ("L40S", 350.0), ("L40", 300.0), ("A10", 150.0), ("T4", 70.0))


def _tdp(model: str) -> float:
    for key, watts in _TDP_W:
        if key in model:
            return watts
    return 300.0


@dataclass(slots=True)
class _Fault:
    xid: int = 0
    ecc_dbe: int = 0
    ecc_sbe: int = 0
    nvlink_crc: int = 0
    remap_failure: int = 0
    temp_offset_c: float = 0.0
    detached: bool = False


@dataclass(slots=True)
class _Counters:
    last_t: float
    energy_mj: float = 0.0
    nvlink_bytes: float = 0.0


@dataclass(slots=True)
class _Load:
    util: float = 0.0
    tensor: float = 0.0
    dram: float = 0.0
    fb_used_mib: float = 0.0
    pcie_rx: float = 0.0
    pcie_tx: float = 0.0
    nvlink: float = 0.0
    owner: str = ""


@dataclass(slots=True)
class SimSource:
    """Device metrics for ``nodes`` (default: every node present) of a simulated cluster.

    ``activity`` maps a pod key to its profile; otherwise the pod's ``gpucluster.io/activity`` annotation
    names one of :data:`PROFILES`; otherwise ``default`` applies. ``clock`` drives phases and energy.
    """

    state: ClusterState
    nodes: Sequence[str] | None = None
    activity: Mapping[str, ActivityProfile] = field(default_factory=dict)
    default: ActivityProfile = PROFILES["compute"]
    clock: Callable[[], float] = time.monotonic
    name: str = "sim"
    _faults: dict[tuple[str, int], _Fault] = field(default_factory=dict)
    _counters: dict[tuple[str, int], _Counters] = field(default_factory=dict)
    _started: dict[str, float] = field(default_factory=dict)

    # ------------------------------------------------------------------ fault injection
    def _fault(self, node: str, gpu: int) -> _Fault:
        i = self.state.node_index.get(node)
        if i is None:
            raise KeyError(f"unknown node {node!r}")
        if not 0 <= gpu < int(self.state.dev_count[i]):
            raise IndexError(f"node {node} has no device {gpu}")
        return self._faults.setdefault((node, gpu), _Fault())

    def inject_xid(self, node: str, gpu: int, xid: int) -> None:
        """The device reports XID ``xid`` (kept as its last XID until :meth:`clear`)."""
        self._fault(node, gpu).xid = xid

    def inject_ecc(self, node: str, gpu: int, double_bit: int = 1, single_bit: int = 0) -> None:
        f = self._fault(node, gpu)
        f.ecc_dbe += double_bit
        f.ecc_sbe += single_bit

    def inject_nvlink_errors(self, node: str, gpu: int, count: int = 1) -> None:
        self._fault(node, gpu).nvlink_crc += count

    def inject_row_remap_failure(self, node: str, gpu: int) -> None:
        self._fault(node, gpu).remap_failure = 1

    def heat(self, node: str, gpu: int, delta_c: float) -> None:
        """Raise (or lower) the device's temperature by ``delta_c`` on top of what its load gives."""
        self._fault(node, gpu).temp_offset_c = delta_c

    def detach(self, node: str, gpu: int) -> None:
        """The device falls off the bus: its series vanish from the next scrape."""
        self._fault(node, gpu).detached = True

    def clear(self, node: str, gpu: int) -> None:
        """Repair: forget every fault of the device (counters keep their totals, as hardware does)."""
        f = self._fault(node, gpu)
        f.xid, f.remap_failure, f.temp_offset_c, f.detached = 0, 0, 0.0, False

    # ------------------------------------------------------------------ sampling
    def profile_for(self, alloc: Allocation) -> ActivityProfile:
        found = self.activity.get(alloc.pod_key)
        if found is not None:
            return found
        if alloc.pod is not None:
            named = alloc.pod.annotations.get(ACTIVITY_ANNOTATION, "")
            if named in PROFILES:
                return PROFILES[named]
        return self.default

    def _loads(self, i: int, now: float) -> list[_Load]:
        st = self.state
        loads = [_Load() for _ in range(int(st.dev_count[i]))]
        for key in sorted(st.pods_on_node[i]):
            alloc = st.allocations[key]
            started = self._started.setdefault(key, now)
            phase = self.profile_for(alloc).at(now - started)
            for g in alloc.grants:
                share = g.core_milli / max(1, int(st.dev_core_cap[i, g.device_index]))
                if g.core_milli == 0:  # memory-only request: HAMi lets it use whatever is idle
                    share = 0.1
                ld = loads[g.device_index]
                ld.util += 100.0 * phase.sm_active * share
                ld.tensor += phase.tensor_active * share
                ld.dram += phase.dram_active * share
                ld.fb_used_mib += phase.memory_fraction * g.memory_mib
                ld.pcie_rx += phase.pcie_rx_bytes_per_s * share
                ld.pcie_tx += phase.pcie_tx_bytes_per_s * share
                ld.nvlink += phase.nvlink_bytes_per_s * share
                ld.owner = ld.owner or key
        return loads

    def sample(self) -> list[DeviceSample]:
        st = self.state
        now = self.clock()
        names = self.nodes if self.nodes is not None else [n.name for i, n in enumerate(st.nodes) if st.present[i]]
        out: list[DeviceSample] = []
        for node in names:
            i = st.node_index[node]
            if not st.present[i]:
                continue
            spec = st.nodes[i]
            for dev, ld in zip(spec.devices, self._loads(i, now), strict=True):
                s = self._sample_device(node, dev, ld, now)
                if s is not None:
                    out.append(s)
        if len(self._started) > 2 * len(st.allocations) + 64:  # forget pods that are gone (bounded memory)
            self._started = {k: v for k, v in self._started.items() if k in st.allocations}
        return out

    def _sample_device(self, node: str, dev: DeviceSpec, ld: _Load, now: float) -> DeviceSample | None:
        fault = self._faults.get((node, dev.index)) or _Fault()
        if fault.detached:
            return None
        util = min(100.0, ld.util)
        tdp = _tdp(dev.model)
        power = 0.1 * tdp + 0.9 * tdp * util / 100.0
        c = self._counters.get((node, dev.index))
        if c is None:
            c = self._counters[(node, dev.index)] = _Counters(last_t=now)
        dt = max(0.0, now - c.last_t)
        c.energy_mj += power * dt * 1000.0
        c.nvlink_bytes += ld.nvlink * dt
        c.last_t = now
        physical = dev.physical_memory_mib or dev.memory_mib
        used = min(float(physical), ld.fb_used_mib)
        ns, _, pod = ld.owner.partition("/")
        return DeviceSample(
            hostname=node,
            gpu=dev.index,
            uuid=dev.uuid,
            model_name=dev.model,
            pci_bus_id=f"00000000:{0x18 + 0x10 * dev.index:02X}:00.0",
            device=f"nvidia{dev.index}",
            namespace=ns,
            pod=pod,
            container=pod and "main",
            sm_clock_mhz=1980.0 if util > 1 else 345.0,
            mem_clock_mhz=2619.0,
            gpu_temp_c=30.0 + 0.5 * util + fault.temp_offset_c,
            memory_temp_c=32.0 + 0.45 * util + fault.temp_offset_c,
            power_w=round(power, 3),
            total_energy_mj=round(c.energy_mj, 3),
            pcie_replay_total=0.0,
            pcie_tx_throughput_kb=round(ld.pcie_tx / 1000.0, 3),
            pcie_rx_throughput_kb=round(ld.pcie_rx / 1000.0, 3),
            gpu_util_pct=round(util, 3),
            mem_copy_util_pct=round(min(100.0, 100.0 * ld.dram), 3),
            enc_util_pct=0.0,
            dec_util_pct=0.0,
            xid=fault.xid,
            fb_used_mib=round(used, 3),
            fb_free_mib=round(physical - used, 3),
            fb_reserved_mib=0.0,
            vgpu_license_status=0.0,
            nvlink_bytes_total=round(c.nvlink_bytes, 3),
            nvlink_crc_errors_total=float(fault.nvlink_crc),
            ecc_dbe_total=float(fault.ecc_dbe),
            ecc_sbe_total=float(fault.ecc_sbe),
            uncorrectable_remapped_rows=float(fault.ecc_dbe),
            correctable_remapped_rows=float(fault.ecc_sbe),
            row_remap_failure=float(fault.remap_failure),
            gr_engine_active=round(util / 100.0, 4),
            tensor_active=round(min(1.0, ld.tensor), 4),
            dram_active=round(min(1.0, ld.dram), 4),
            pcie_tx_bytes_per_s=ld.pcie_tx,
            pcie_rx_bytes_per_s=ld.pcie_rx,
        )

    def close(self) -> None:
        return None
