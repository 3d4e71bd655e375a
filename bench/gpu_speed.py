"""The speed model's figures for docs/gpu-speed.md: the Gavel check and the speed of every catalog GPU.

Prints (as Markdown) the per-job-type table of Gavel's measured P100/V100 and K80/V100 throughput ratios next to
the speed model's predictions, the error summary the test asserts, and each GPU's speed per work class relative
to an H100 SXM. ``--calibrate`` also prints the ``sustained`` value for P100 and K80 that would make their
geometric-mean error zero (how the catalog's calibrated P100 figure was found).

    .venv/bin/python bench/gpu_speed.py [--oracle ../shared/traces/gavel-philly-derived/oracle_throughputs.json]
                                        [--perf FILE] [--calibrate] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

from gpucluster.design.prices import load_price_catalog
from gpucluster.design.work_cost import cloud_prices
from gpucluster.perf import SpeedModel, load_perf_catalog
from gpucluster.perf.catalog import PerfCatalog
from gpucluster.perf.gavel import error_summary, gavel_check, load_oracle

ORACLE = Path(__file__).resolve().parents[1].parent / "shared/traces/gavel-philly-derived/oracle_throughputs.json"
CLASSES = ("training/transformer", "training/cnn", "training/rnn", "inference/llm-decode", "inference/llm-prefill",
           "inference/mixed")


def _with_sustained(cat: PerfCatalog, gpu: str, value: float) -> PerfCatalog:
    gpus = dict(cat.gpus)
    gpus[gpu] = dataclasses.replace(gpus[gpu], sustained=value)
    return dataclasses.replace(cat, gpus=gpus)


def calibrate(cat: PerfCatalog, oracle: dict[str, object], gpu: str) -> float:
    """``sustained`` for ``gpu`` that zeroes the geometric-mean error of its Gavel ratios (fixed point)."""
    value = cat.gpus[gpu].sustained
    for _ in range(50):
        rows = [r for r in gavel_check(SpeedModel(_with_sustained(cat, gpu, value)), oracle) if r.gpu == gpu]
        bias = math.exp(sum(math.log(r.predicted / r.measured) for r in rows) / len(rows))
        value = min(1.0, value / bias ** 1.3)
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--oracle", type=Path, default=ORACLE)
    ap.add_argument("--perf", type=Path, default=None, help="a performance catalog instead of the bundled one")
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cat = load_perf_catalog(args.perf)
    model = SpeedModel(cat)
    oracle = load_oracle(args.oracle)
    rows = gavel_check(model, oracle)
    summary = error_summary(rows)
    speeds = {g: {c: round(model.factor(model.job(ref_gpu="H100-SXM5-80GB", work_class=c), g), 3) for c in CLASSES}
              for g in cat.gpus}
    if args.json:
        print(json.dumps({"gavel": [dataclasses.asdict(r) | {"error": r.error} for r in rows],
                          "summary": summary, "speed_vs_h100": speeds}, indent=2))
        return
    print("| job type | class | GPU | measured | predicted | error |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.job_type} | {r.work_class.split('/')[1]} | {r.gpu.split('-')[0]} | {r.measured:.3f} | "
              f"{r.predicted:.3f} | {r.error:+.0%} |")
    print()
    print(", ".join(f"{k} {v:.3f}" for k, v in summary.items()))
    print()
    print("| GPU | " + " | ".join(CLASSES) + " |")
    print("|---|" + "---|" * len(CLASSES))
    for g, row in speeds.items():
        print(f"| {g} | " + " | ".join(f"{row[c]:.2f}" for c in CLASSES) + " |")
    print()
    print("Cloud cost per H100-hour of work (USD; cheapest region of the price catalog; spot with the default "
          "SpotRisk)")
    print("| GPU | option | $/GPU-hour | " + " | ".join(CLASSES) + " |")
    print("|---|---|---|" + "---|" * len(CLASSES))
    for g in cat.gpus:
        for option in ("on-demand", "spot"):
            offers = [p for p in cloud_prices(load_price_catalog(), g) if p.option == option]
            if not offers:
                continue
            best = offers[0]
            costs = [best.usd_per_ref_gpu_hour(speeds[g][c]) for c in CLASSES]
            print(f"| {g} | {option} ({best.provider} {best.region}) | {best.usd_per_gpu_hour:.2f} | "
                  + " | ".join(f"{c:.2f}" for c in costs) + " |")
    if args.calibrate:
        for gpu in ("P100-PCIe-16GB", "K80"):
            print(f"calibrated sustained for {gpu}: {calibrate(cat, oracle, gpu):.3f} "
                  f"(catalog: {cat.gpus[gpu].sustained})")


if __name__ == "__main__":
    main()
