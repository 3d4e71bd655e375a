"""Paired per-seed differences of ``bench/mixed_placement.py --json`` runs: is speed-fgd's miss real?

    .venv/bin/python bench/mixed_placement.py --jobs 1200 --seeds 0,1,2,3,4,5,6,7,8,9 --json > runs.json
    .venv/bin/python bench/mixed_paired.py runs.json [more.json ...] [--column idle_gpus_while_waiting] [--json]
    .venv/bin/python bench/mixed_paired.py runs.json [more.json ...] --grid [--against stranding-fgd]

For each cluster, trace and queue of the runs (one JSON list per file, as ``mixed_placement.py --json`` prints it;
files are merged, a run repeated in several files counts once) and one column (default: idle GPUs while work
waits), it takes the *best other* placement -- of stranding-fgd and gavel, the one whose mean over the seeds is best
(lowest; highest for the GPU-hours-per-hour columns) -- and the per-seed difference d_s = speed-fgd - best other on
the same seed (the same jobs and cluster, so the pair removes the seed's own spread). It prints per row the
seeds, the three means, the mean of d and its 95 % confidence interval two ways: Student's t (mean +- t(0.975,
n - 1) x sd / sqrt(n)) and a percentile bootstrap of the mean (20,000 resamples of the seeds, numpy's default
generator, seed 0); the percentage is how much worse speed-fgd's mean is than the best mean (negative: better).
"real" when both intervals lie on the side of zero that makes speed-fgd worse; "above 2 %"
when both lie beyond 2 % of the best mean (the issue's tolerance), i.e. the miss itself is measurably more than
2 %. Only seeds where all three placements ran count. numpy and scipy's t quantile.

``--grid`` prints every column at once, one cell per row and column: speed-fgd's mean against the best other's in %
of that mean (negative: better), the 95 % interval of it (at each end the wider of t and bootstrap) and a word:
``best`` / ``within`` (its mean is the best, or within 2 % of the best mean), ``MISS`` (more than 2 % from the best
mean and both intervals beyond 2 %: a real miss) or ``open`` (more than 2 % on the mean, but the seeds cannot tell).
``--against stranding-fgd`` pairs with that placement instead and says ``better`` (both intervals on speed-fgd's
better side of zero), ``WORSE`` (both on the other side), ``better (signs)`` / ``WORSE (signs)`` (the intervals
straddle zero but the exact sign test over the seeds gives p < 0.05: one seed's scale dominates the mean) or
``level``: the issue's "strictly better" test. Each cell also shows the seeds where speed-fgd is better - worse.
``--means`` prints ``mixed_placement.py``'s table of means (and speed-fgd's spread) for the same runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import binomtest
from scipy.stats import t as student_t

OTHERS = ("stranding-fgd", "gavel")
HIGHER_BETTER = {"ref_work_per_h", "ref_work_per_h_window"}


def t975(df: int) -> float:
    """Student's t 0.975 quantile for ``df`` degrees of freedom (scipy's)."""
    return float(student_t.ppf(0.975, df))


def paired(rows: list[dict[str, Any]], column: str, resamples: int = 20_000,
           against: str | None = None) -> list[dict[str, Any]]:
    """One dict per cluster, trace and queue (see the module docstring); ``against`` names the placement to pair
    speed-fgd with instead of the best other by mean."""
    up = column in HIGHER_BETTER
    runs: dict[tuple[str, str, str], dict[str, dict[int, float]]] = {}
    for r in rows:
        key = (r["cluster"], r["trace"], r["queue"])
        runs.setdefault(key, {}).setdefault(r["placement"], {})[int(r["seed"])] = float(r[column])
    rng = np.random.default_rng(0)
    out = []
    for (cname, tname, queue), by in runs.items():
        if "speed-fgd" not in by or not any(p in by for p in OTHERS) or (against and against not in by):
            continue
        names = ["speed-fgd", *(p for p in OTHERS if p in by)]
        seeds = sorted(set.intersection(*(set(by[p]) for p in names)))
        if len(seeds) < 2:
            continue
        vals = {p: np.array([by[p][s] for s in seeds]) for p in names}
        means = {p: float(v.mean()) for p, v in vals.items()}
        others = [p for p in names if p != "speed-fgd"]
        if against:
            best_other = against
        else:
            best_other = max(others, key=lambda p: means[p]) if up else min(others, key=lambda p: means[p])
        d = vals["speed-fgd"] - vals[best_other]
        worse = -d if up else d  # > 0: speed-fgd worse
        n = len(d)
        half = t975(n - 1) * float(d.std(ddof=1)) / math.sqrt(n)
        boot = d[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
        b_lo, b_hi = (float(x) for x in np.percentile(boot, [2.5, 97.5]))
        t_lo, t_hi = float(d.mean()) - half, float(d.mean()) + half
        best = max(means.values()) if up else min(means.values())
        tol = 0.02 * abs(best)
        ref = abs(means[best_other])
        lo_worse = min(-t_hi, -b_hi) if up else min(t_lo, b_lo)  # the interval's end nearest to "not worse"
        hi_worse = max(-t_lo, -b_lo) if up else max(t_hi, b_hi)  # and the end farthest from it
        wins, losses = int((worse < 0).sum()), int((worse > 0).sum())
        sign_p = float(binomtest(wins, wins + losses).pvalue) if wins + losses else 1.0
        out.append({
            "cluster": cname, "trace": tname, "queue": queue, "column": column, "seeds": seeds,
            "means": means, "best_other": best_other, "diff_mean": float(d.mean()),
            "t_ci": [t_lo, t_hi], "boot_ci": [b_lo, b_hi],
            "miss_pct": 100.0 * float(worse.mean()) / abs(best) if best else 0.0,
            "real": lo_worse > 0.0, "above_tolerance": lo_worse > tol,
            "within_tolerance": hi_worse <= tol, "better": hi_worse < 0.0,
            # in % of the compared placement's mean (the best other, or ``against``): the mean and the 95 %
            # interval (the wider of the two at each end) of how much worse speed-fgd is; > 0 is worse
            "worse_pct": 100.0 * float(worse.mean()) / ref if ref else 0.0,
            "worse_ci_pct": [100.0 * lo_worse / ref if ref else 0.0, 100.0 * hi_worse / ref if ref else 0.0],
            # the seeds where speed-fgd is better / worse, and the exact two-sided sign test's p over them (ties
            # left out): robust where one seed's scale dominates the mean (the Philly windows differ 15x in JCT)
            "wins": wins, "losses": losses, "sign_p": sign_p,
            "per_seed_diff": [float(x) for x in d],
        })
    return out


# the columns of ``mixed_placement.py`` the grid shows, with a short title
GRID_COLUMNS = (("avg_jct_s", "avg JCT"), ("p99_jct_s", "p99 JCT"), ("ref_work_per_h", "ref GPU-h / h"),
                ("ref_work_per_h_window", "ref GPU-h / h in window"), ("idle_gpus", "idle GPUs"),
                ("idle_gpus_while_waiting", "idle GPUs while work waits"),
                ("idle_gpu_h_while_waiting_per_h", "idle GPU-h while waiting / h"))


def verdict(r: dict[str, Any], tolerance: bool = True) -> str:
    """One word for a :func:`paired` result. Against the best other (``tolerance``, the issue's goal: best or within
    2 % of the best): ``best`` or ``within`` (its mean is the best, or within 2 % of the best mean) and, for a mean
    more than 2 % from the best, ``MISS`` when both 95 % intervals lie beyond 2 % (the miss is real and larger than
    the tolerance) and ``open`` otherwise (the seeds cannot tell). Against one placement (``tolerance`` false: is
    speed-fgd strictly better?): ``better`` when both intervals lie on speed-fgd's better side of zero, ``WORSE``
    when both lie on the other side; where the intervals straddle zero, ``better (signs)`` / ``WORSE (signs)`` when
    the exact sign test over the seeds (ties left out) gives p < 0.05, ``level`` otherwise."""
    if not tolerance:
        if r["better"] or r["real"]:
            return "better" if r["better"] else "WORSE"
        if r["sign_p"] < 0.05:  # the intervals straddle zero, but the seeds' signs do not
            return "better (signs)" if r["wins"] > r["losses"] else "WORSE (signs)"
        return "level"
    if r["miss_pct"] <= 0.0:
        return "best"
    if r["miss_pct"] <= 2.0:
        return "within"
    return "MISS" if r["above_tolerance"] else "open"


def grid(rows: list[dict[str, Any]], against: str | None = None) -> list[str]:
    """Markdown lines: one row per cluster, trace and queue, one cell per column of :data:`GRID_COLUMNS`: how much
    worse speed-fgd's mean is than the best mean in % (negative: better), the 95 % interval of that figure from
    the paired differences (the wider of Student's t and the bootstrap at each end), the seeds where speed-fgd is
    better - worse, and :func:`verdict`'s word."""
    cells: dict[tuple[str, str, str], dict[str, str]] = {}
    counts: dict[str, int] = {}
    for key, _ in GRID_COLUMNS:
        for r in paired(rows, key, against=against):
            lo, hi = r["worse_ci_pct"]
            pct = r["worse_pct"]
            word = verdict(r, tolerance=against is None)
            counts[word] = counts.get(word, 0) + 1
            cells.setdefault((r["cluster"], r["trace"], r["queue"]), {})[key] = \
                f"{pct:+.1f} % ({lo:+.1f} .. {hi:+.1f}) {r['wins']}-{r['losses']} {word}"
    head = ["cluster", "trace", "queue", "seeds", *(t for _, t in GRID_COLUMNS)]
    seeds = {(r["cluster"], r["trace"], r["queue"]): r["seeds"]
             for r in paired(rows, GRID_COLUMNS[0][0], resamples=1, against=against)}
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k, by in cells.items():
        out.append("| " + " | ".join([*k, str(len(seeds[k])), *(by.get(c, "-") for c, _ in GRID_COLUMNS)]) + " |")
    out += ["", "Cells: " + ", ".join(f"{w} {n}" for w, n in sorted(counts.items())) + "."]
    return out


def _ranges(seeds: list[int]) -> str:
    """``0..7,9..20`` for runs of consecutive seeds."""
    parts: list[str] = []
    start = prev = seeds[0]
    for x in [*seeds[1:], None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        parts.append(str(start) if start == prev else f"{start}..{prev}")
        if x is not None:
            start = prev = x
    return ",".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--column", default="idle_gpus_while_waiting")
    ap.add_argument("--grid", action="store_true", help="every column at once, one cell each (see grid())")
    ap.add_argument("--against", default=None, help="pair with this placement instead of the best other")
    ap.add_argument("--means", action="store_true",
                    help="mixed_placement.py's table of means over the seeds of the runs (no simulation)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for f in a.files:
        for r in json.loads(f.read_text()):
            rows[(r["cluster"], r["trace"], r["queue"], r["placement"], r["seed"])] = r
    if a.means:
        spec = importlib.util.spec_from_file_location("mixed_placement", Path(__file__).with_name("mixed_placement.py"))
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        print("\n".join(mod.summarise(list(rows.values()))))
        return
    if a.grid:
        print("\n".join(grid(list(rows.values()), a.against)))
        return
    res = paired(list(rows.values()), a.column, against=a.against)
    if a.json:
        print(json.dumps(res, indent=1))
        return
    print(f"Column {a.column}: speed-fgd minus the best other placement (by mean), paired by seed.")
    print()
    print("| cluster | trace | queue | seeds | means: sfgd / gavel / **speed-fgd** | best other | "
          "mean difference (worse by, % of best) | 95 % CI, t | 95 % CI, bootstrap | worse, measurably? | "
          "more than 2 %? |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in res:
        m = r["means"]
        means = " / ".join(f"**{m[p]:,.2f}**" if p == "speed-fgd" else f"{m[p]:,.2f}"
                           for p in ("stranding-fgd", "gavel", "speed-fgd") if p in m)
        seeds = _ranges(r["seeds"])
        s = r["seeds"]
        print(f"| {r['cluster']} | {r['trace']} | {r['queue']} | {seeds} ({len(s)}) | {means} | "
              f"{r['best_other']} | {r['diff_mean']:+,.2f} ({r['miss_pct']:+.1f} %) | "
              f"{r['t_ci'][0]:+,.2f} .. {r['t_ci'][1]:+,.2f} | {r['boot_ci'][0]:+,.2f} .. {r['boot_ci'][1]:+,.2f} | "
              f"{'yes' if r['real'] else 'no'} | {'yes' if r['above_tolerance'] else 'no'} |")


if __name__ == "__main__":
    main()
