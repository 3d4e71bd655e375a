"""Topology diagram (matplotlib, Agg): compute groups, leaves, spines, cores, with counts."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

from gpucluster.design.planner import Design

MAX_BOXES = 12


def _visible(n: int) -> list[int | None]:
    """Indices to draw; None marks an ellipsis box."""
    if n <= MAX_BOXES:
        return list(range(n))
    return [*range(MAX_BOXES - 2), None, n - 1]


def _groups(d: Design) -> list[tuple[str, int, int]]:
    """Compute groups (label, first server, servers): an SU each when rail-optimised."""
    f = d.fabric
    out: list[tuple[str, int, int]] = []
    if f.rail_optimized and f.scalable_units:
        reserved = d.req.fabric.reserved_slots
        start = 0
        for su in range(f.scalable_units):
            cap = f.nodes_per_su - (reserved if su == 0 else 0)
            n = min(cap, d.servers - start)
            out.append((f"SU{su + 1}", start, n))
            start += n
        return out
    per = max(1, d.servers_per_rack * 8)
    for i in range(math.ceil(d.servers / per)):
        out.append((f"G{i + 1}", i * per, min(per, d.servers - i * per)))
    return out


def draw(d: Design, png: str | Path, svg: str | Path) -> None:
    """Write the diagram as PNG and SVG."""
    f = d.fabric
    groups = _groups(d)
    tiers: list[tuple[str, int, str]] = []  # (title, count, box prefix)
    if f.cores:
        tiers.append((f"Core: {f.cores} x {d.fabric_switch}", f.cores, "C"))
    if f.spines:
        tiers.append((f"Spine: {f.spines} x {d.fabric_switch}", f.spines, "S"))
    tiers.append((f"Leaf: {f.leaves} x {d.fabric_switch}", f.leaves, "L"))
    fig, ax = plt.subplots(figsize=(14, 1.9 * (len(tiers) + 1) + 0.8))
    ax.set_xlim(-3.2, MAX_BOXES + 0.2)
    levels = len(tiers) + 1
    ax.set_ylim(-0.8, (levels - 1) * 1.6 + 0.8)
    ax.axis("off")
    centers: dict[str, list[tuple[float, int | None]]] = {}

    def row(y: float, n: int, *, labels: list[str], color: str, key: str,
            idx: list[int | None]) -> None:
        width = MAX_BOXES / max(len(idx), 1)
        pts: list[tuple[float, int | None]] = []
        for j, (i, lab) in enumerate(zip(idx, labels, strict=True)):
            x = j * width + width / 2
            box = FancyBboxPatch((x - width * 0.42, y - 0.3), width * 0.84, 0.6,
                                 boxstyle="round,pad=0.02", fc=color if i is not None else "white",
                                 ec="black", lw=0.8)
            ax.add_patch(box)
            ax.text(x, y, lab, ha="center", va="center", fontsize=7)
            pts.append((x, i))
        centers[key] = pts
        del n

    y = 0.0
    gidx: list[int | None] = list(_visible(len(groups)))
    glabels = ["..." if i is None else
               f"{groups[i][0]}\n{groups[i][2]} servers\n{math.ceil(groups[i][2] / d.servers_per_rack)} racks"
               for i in gidx]
    row(y, len(groups), labels=glabels, color="#cfe8cf", key="G", idx=gidx)
    ax.text(-3.1, y, f"Compute: {d.servers} servers\n{d.gpus} x {d.gpu.name}\n"
            f"{d.compute_racks} racks", va="center", fontsize=9, weight="bold")
    colors = {"L": "#cfe0f5", "S": "#f5e3c4", "C": "#f2c9c9"}
    for title, n, prefix in reversed(tiers):
        y += 1.6
        idx = _visible(n)
        labels = ["..." if i is None else f"{prefix}{i + 1}" for i in idx]
        if prefix == "L" and f.rail_optimized and f.rails:
            labels = ["..." if i is None else f"L{i + 1}\nSU{i // f.rails + 1} rail {i % f.rails + 1}"
                      for i in idx]
        row(y, n, labels=labels, color=colors[prefix], key=prefix, idx=idx)
        ax.text(-3.1, y, title, va="center", fontsize=9, weight="bold")

    def link(lo: str, hi: str, ylo: float, yhi: float, ok: object) -> None:
        for xl, il in centers[lo]:
            for xh, ih in centers[hi]:
                if il is None or ih is None or (callable(ok) and not ok(il, ih)):
                    continue
                ax.plot([xl, xh], [ylo + 0.3, yhi - 0.3], color="gray", lw=0.4, alpha=0.5)

    rails = max(f.rails, 1)
    if f.rail_optimized:
        link("G", "L", 0.0, 1.6, lambda g, leaf: leaf // rails == g)
    else:
        per = max(1, d.servers_per_rack * 8)
        link("G", "L", 0.0, 1.6,
             lambda g, leaf: leaf * f.leaf_down // max(d.nics_per_server, 1) // per == g)
    if f.spines:
        if f.tiers == 3:
            link("L", "S", 1.6, 3.2, lambda leaf, s: leaf // f.leaves_per_pod == s // f.leaf_up)
        else:
            link("L", "S", 1.6, 3.2, None)
    if f.cores:
        link("S", "C", 3.2, 4.8, None)
    c = f
    subtitle = (f"{d.req.fabric.type} {c.link_gbps} Gb/s, {c.tiers}-tier, {c.radix}-port switches, "
                f"{'rail-optimised, ' if c.rail_optimized else ''}{c.oversubscription:g}:1, "
                f"bisection {c.bisection_tbps:g} Tb/s | cables: node-leaf {c.node_to_leaf}, "
                f"leaf-spine {c.leaf_to_spine}, spine-core {c.spine_to_core}")
    ax.set_title(f"{d.req.name}: {d.racks} racks, {d.servers} servers, {d.gpus} GPUs\n{subtitle}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    fig.savefig(svg)
    plt.close(fig)
