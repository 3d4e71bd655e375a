"""Floor layout and the port-to-port cable schedule of the compute fabric.

Layout model (documented in docs/design.md): compute racks stand in rows of ``racks_per_row``
(one scalable unit per row when rail-optimised); each row ends in a network rack holding that
row's leaves (end of row). Spines and cores stand in central network racks in rows after the
last compute row, 16 switches per rack. Rack pitch 0.6 m, row pitch 2.4 m. A cable inside one
rack is 2 m; between racks it is the Manhattan distance plus 3 m for the runs up to the tray,
down, and slack, rounded up to 0.5 m. Reach classes: DAC <= 3 m, AOC <= 100 m, single-mode
beyond.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from dataclasses import dataclass

from gpucluster.design.network import ClosPlan

RACK_PITCH_M = 0.6
ROW_PITCH_M = 2.4
IN_RACK_M = 2.0
RUN_SLACK_M = 3.0
DAC_MAX_M = 3.0
AOC_MAX_M = 100.0
SWITCHES_PER_NETWORK_RACK = 16


def reach_class(length_m: float) -> str:
    if length_m <= DAC_MAX_M:
        return "dac"
    if length_m <= AOC_MAX_M:
        return "aoc"
    return "smf"


@dataclass(frozen=True, slots=True)
class Cable:
    """One cable: both ends (device, port, rack), its length and reach class."""

    id: int
    tier: str  # node_to_leaf | leaf_to_spine | spine_to_core
    a_device: str
    a_port: str
    a_rack: str
    b_device: str
    b_port: str
    b_rack: str
    length_m: float
    kind: str


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each rack stands: name -> (row, column)."""

    racks_per_row: int
    compute_racks: int
    rows: int
    leaf_racks: int
    spine_racks: int
    core_racks: int
    positions: dict[str, tuple[int, int]]


def _server_slot(g: int, down: int, reserved: int) -> tuple[int, int]:
    """Server index -> (SU, slot); the first SU's last ``reserved`` slots hold appliances."""
    if g < down - reserved:
        return 0, g
    h = g + reserved
    return h // down, h % down


def server_name(g: int) -> str:
    return f"gpu-{g + 1:04d}"


def compute_rack_name(r: int) -> str:
    return f"R{r + 1:03d}"


class _Builder:
    def __init__(self, *, plan: ClosPlan, servers: int, per_server: int, spr: int,
                 reserved: int, central_first: int) -> None:
        self.plan = plan
        self.servers = servers
        self.per_server = per_server
        self.spr = max(1, spr)
        self.reserved = reserved
        rpr = max(1, math.ceil(plan.nodes_per_su / self.spr)) if plan.rail_optimized else 8
        self.rpr = rpr
        self.compute_racks = math.ceil(servers / self.spr) if servers else 0
        self.rows = max(1, math.ceil(self.compute_racks / rpr))
        self.pos: dict[str, tuple[int, int]] = {
            compute_rack_name(r): (r // rpr, r % rpr) for r in range(self.compute_racks)
        }
        self.leaf_rack: dict[int, str] = {}
        self.cables: list[Cable] = []
        self.central_idx = central_first

    def rack_of_server(self, g: int) -> str:
        return compute_rack_name(g // self.spr)

    def eor_rack(self, row: int) -> str:
        name = f"N{row + 1:03d}"
        self.pos.setdefault(name, (row, self.rpr))
        return name

    def central_rack(self, prefix: str, idx: int) -> str:
        name = f"{prefix}{idx + 1:02d}"
        if name not in self.pos:
            i = self.central_idx
            self.central_idx += 1
            self.pos[name] = (self.rows + i // (self.rpr + 1), i % (self.rpr + 1))
        return name

    def length(self, a: str, b: str) -> float:
        if a == b:
            return IN_RACK_M
        (r1, c1), (r2, c2) = self.pos[a], self.pos[b]
        d = abs(c1 - c2) * RACK_PITCH_M + abs(r1 - r2) * ROW_PITCH_M + RUN_SLACK_M
        return math.ceil(d * 2) / 2

    def add(self, tier: str, a_end: tuple[str, str, str], b_end: tuple[str, str, str]) -> None:
        (a, ap, ar), (b, bp, br) = a_end, b_end
        ln = self.length(ar, br)
        self.cables.append(Cable(len(self.cables) + 1, tier, a, ap, ar, b, bp, br, ln, reach_class(ln)))


def leaf_name(plan: ClosPlan, i: int) -> str:
    if plan.rail_optimized and plan.rails:
        return f"leaf-su{i // plan.rails + 1:02d}-r{i % plan.rails + 1}"
    return f"leaf-{i + 1:03d}"


def spine_name(plan: ClosPlan, i: int) -> str:
    if plan.tiers == 3:
        return f"spine-p{i // plan.leaf_up + 1:02d}-{i % plan.leaf_up + 1:02d}"
    return f"spine-{i + 1:03d}"


def build_schedule(plan: ClosPlan, *, servers: int, per_server: int, servers_per_rack: int,
                   reserved_slots: int, extra_ports: int) -> tuple[list[Cable], Layout]:
    """Every compute-fabric cable, port to port, and the layout it assumes."""
    b = _Builder(plan=plan, servers=servers, per_server=per_server, spr=servers_per_rack,
                 reserved=reserved_slots, central_first=0)
    if plan.tiers == 0 or plan.leaves == 0:
        return [], Layout(b.rpr, b.compute_racks, b.rows, 0, 0, 0, b.pos)
    down = plan.leaf_down
    # where each leaf stands: the EoR rack of its first server's row
    leaf_home: dict[int, str] = {}
    ufm_rack = b.central_rack("M", 0)

    def home(leaf: int, first_server: int) -> str:
        if leaf not in leaf_home:
            row = (first_server // b.spr) // b.rpr if first_server < servers else b.rows - 1
            leaf_home[leaf] = b.eor_rack(row)
        return leaf_home[leaf]

    if plan.rail_optimized:
        for g in range(servers):
            su, slot = _server_slot(g, down, reserved_slots)
            for r in range(per_server):
                leaf = su * per_server + r
                first = 0 if su == 0 else su * down - reserved_slots
                b.add("node_to_leaf", (server_name(g), f"nic{r + 1}", b.rack_of_server(g)),
                      (leaf_name(plan, leaf), f"p{slot + 1}", home(leaf, first)))
        for u in range(extra_ports):
            slot = down - reserved_slots + u // per_server
            r = u % per_server
            b.add("node_to_leaf", (f"ufm-{u + 1}", "ib0", ufm_rack),
                  (leaf_name(plan, r), f"p{slot + 1}", home(r, 0)))
    else:
        ends = [(server_name(g), f"nic{r + 1}", b.rack_of_server(g))
                for g in range(servers) for r in range(per_server)]
        ends += [(f"ufm-{u + 1}", "ib0", ufm_rack) for u in range(extra_ports)]
        for e, end in enumerate(ends):
            leaf, port = (e // down, e % down) if plan.tiers > 1 else (0, e)
            b.add("node_to_leaf", end, (leaf_name(plan, leaf), f"p{port + 1}",
                                        home(leaf, (leaf * down) // max(per_server, 1))))
    spine_rack = {i: b.central_rack("S", i // SWITCHES_PER_NETWORK_RACK) for i in range(plan.spines)}
    core_rack = {i: b.central_rack("C", i // SWITCHES_PER_NETWORK_RACK) for i in range(plan.cores)}
    for leaf in range(plan.leaves):
        lr = leaf_home.get(leaf) or home(leaf, servers)
        for j in range(plan.leaf_up):
            if plan.tiers == 2:
                s = j % plan.spines
                sp = leaf * plan.links_per_leaf_spine + j // plan.spines + 1
            else:
                pod, local = divmod(leaf, plan.leaves_per_pod)
                s = pod * plan.leaf_up + j
                sp = local + 1
            b.add("leaf_to_spine", (leaf_name(plan, leaf), f"p{down + j + 1}", lr),
                  (spine_name(plan, s), f"p{sp}", spine_rack[s]))
    if plan.tiers == 3:
        half = plan.radix // 2
        used = [0] * plan.cores
        for s in range(plan.spines):
            for m in range(half):
                c = (s * half + m) % plan.cores
                used[c] += 1
                b.add("spine_to_core", (spine_name(plan, s), f"p{half + m + 1}", spine_rack[s]),
                      (f"core-{c + 1:03d}", f"p{used[c]}", core_rack[c]))
    layout = Layout(b.rpr, b.compute_racks, b.rows, len(set(leaf_home.values())),
                    len(set(spine_rack.values())), len(set(core_rack.values())), b.pos)
    return b.cables, layout


def count_by(cables: list[Cable]) -> dict[str, dict[str, int]]:
    """{tier: {kind: count}}."""
    out: dict[str, Counter[str]] = {}
    for c in cables:
        out.setdefault(c.tier, Counter())[c.kind] += 1
    return {t: dict(sorted(k.items())) for t, k in out.items()}


def to_csv(cables: list[Cable]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["cable_id", "tier", "a_device", "a_port", "a_rack", "b_device", "b_port",
                "b_rack", "length_m", "type"])
    for c in cables:
        w.writerow([c.id, c.tier, c.a_device, c.a_port, c.a_rack, c.b_device, c.b_port, c.b_rack,
                    f"{c.length_m:g}", c.kind])
    return buf.getvalue()
