"""For which workload mixes does the seed's "L40S for inference is more cost-effective" hold? (docs/design.md)

For each mix of work (shares of H100-seconds by speed-model class) and each GPU, the cost of one reference
(H100) GPU-hour of work: owned (a 16-server design of that GPU through the design calculator: capex / 4 years +
power, over 8,760 h x ``--utilization``), and rented (the cheapest on-demand and spot offer of the price catalog;
spot with the default lost-work model, one interruption a day, hourly checkpoints). The speed of a mix on a GPU is
the work-weighted harmonic mean of its classes' speeds (``design.work_cost.mix_speed``). "holds" = the L40S is
cheaper per unit of work than the H100 under that way of buying.

The same arithmetic is what ``gpucluster whatif`` reports per design (whose owned utilisation is the trace's
steady state); this script sweeps mixes without simulating, so it runs in a second.

    .venv/bin/python bench/l40s_inference.py [--utilization 0.6] [--servers 16] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys

from gpucluster.design import design, load_price_catalog, parse_requirements
from gpucluster.design.work_cost import SpotRisk, cloud_prices, mix_speed, owned_price
from gpucluster.perf import SpeedModel

GPUS = ("H100", "L40S")
HOST_BOUND = (0.2, 0.2, 0.6)
"""(compute, memory, host) shares on the H100 of small-model serving bound by request handling (an assumption)."""
MIXES: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = (
    ("LLM decode only", (("inference/llm-decode", 1.0),)),
    ("LLM prefill / embeddings only", (("inference/llm-prefill", 1.0),)),
    ("decode 50 % + prefill 50 %", (("inference/llm-decode", 0.5), ("inference/llm-prefill", 0.5))),
    ("mixed serving (vision, BERT, diffusion)", (("inference/mixed", 1.0),)),
    ("host-bound small-model serving", (("host-bound", 1.0),)),
    ("host-bound 50 % + mixed serving 50 %", (("host-bound", 0.5), ("inference/mixed", 0.5))),
    ("mixed serving 70 % + transformer training 30 %", (("inference/mixed", 0.7), ("training/transformer", 0.3))),
    ("transformer training only", (("training/transformer", 1.0),)),
    ("CNN training only", (("training/cnn", 1.0),)),
)


def speeds(model: SpeedModel, gpu: str) -> dict[str, float]:
    """Speed per class on ``gpu`` relative to the H100 (work in H100 seconds)."""
    out = {}
    for cls in {c for _, mix in MIXES for c, _ in mix}:
        if cls == "host-bound":
            job = model.job(kind="inference", ref_gpu="H100", shares=HOST_BOUND)
        else:
            job = model.job(kind=model.catalog.work_class(cls).kind, work_class=cls, ref_gpu="H100")
        out[cls] = model.factor(job, gpu)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--utilization", type=float, default=0.6, help="owned GPUs' utilisation (0-1]")
    ap.add_argument("--servers", type=int, default=16)
    ap.add_argument("--years", type=float, default=4.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not 0 < args.utilization <= 1:
        print("--utilization: must be within (0, 1]", file=sys.stderr)
        return 2
    prices = load_price_catalog(None)
    model = SpeedModel()
    per_gpu: dict[str, dict[str, object]] = {}
    for gpu in GPUS:
        d = design(parse_requirements({"name": gpu, "gpu": gpu, "servers": args.servers}), prices)
        owned_year = d.cost.capex_usd / args.years + d.cost.power_usd_per_year
        cloud = cloud_prices(prices, d.gpu.name, SpotRisk())
        per_gpu[gpu] = {
            "name": d.gpu.name,
            "owned": owned_price(d.gpu.name, owned_year, d.gpus, args.utilization),
            "on-demand": next((c for c in cloud if c.option == "on-demand"), None),
            "spot": next((c for c in cloud if c.option == "spot"), None),
            "speeds": speeds(model, d.gpu.name),
        }
    rows = []
    for label, mix in MIXES:
        row: dict[str, object] = {"mix": label}
        for gpu in GPUS:
            sp = per_gpu[gpu]["speeds"]
            assert isinstance(sp, dict)
            s = mix_speed([w for _, w in mix], [sp[c] for c, _ in mix])
            row[f"{gpu}_speed"] = round(s, 3)
            for option in ("owned", "on-demand", "spot"):
                price = per_gpu[gpu][option]
                row[f"{gpu}_{option}"] = None if price is None else round(price.usd_per_ref_gpu_hour(s), 3)  # type: ignore[attr-defined]
        for option in ("owned", "on-demand", "spot"):
            h, lo = row[f"H100_{option}"], row[f"L40S_{option}"]
            row[f"holds_{option}"] = None if h is None or lo is None else lo < h  # type: ignore[operator]
        rows.append(row)
    meta = {"utilization": args.utilization, "servers": args.servers, "years": args.years,
            "machine": f"{platform.node()} ({platform.processor() or platform.machine()})"}
    if args.json:
        print(json.dumps({"assumptions": meta, "rows": rows}, indent=2))
        return 0
    print(f"owned: {args.servers} servers per design, capex / {args.years:g} years + power, "
          f"{args.utilization:.0%} utilised; cloud: cheapest offer; $ per H100-hour of work")
    print()
    print("| mix | L40S speed vs H100 | owned H100 / L40S | on demand H100 / L40S | spot H100 / L40S | "
          "L40S cheaper? owned / on demand / spot |")
    print("|---|---|---|---|---|---|")

    def yn(v: object) -> str:
        return "n/a" if v is None else "**yes**" if v else "no"

    for r in rows:
        print(f"| {r['mix']} | {r['L40S_speed']:.2f} | ${r['H100_owned']:.2f} / ${r['L40S_owned']:.2f} | "
              f"${r['H100_on-demand']:.2f} / ${r['L40S_on-demand']:.2f} | ${r['H100_spot']:.2f} / "
              f"${r['L40S_spot']:.2f} | {yn(r['holds_owned'])} / {yn(r['holds_on-demand'])} / "
              f"{yn(r['holds_spot'])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
