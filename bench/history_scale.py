"""The job history at scale: pages and counts of ``Store.history`` (``GET /api/v1/jobs?include=pruned``) over a
store of 1,000,000 jobs, and what the same questions cost read the way they were before (a ``COUNT(*)`` over the
matching rows, ``instr`` over every row for ``q``, a cursor as an ``OR`` of two comparisons).

The jobs go in through the store's own schema and triggers (``job_counts``, ``jobs_text`` kept as every write
keeps them), in batches of 10,000 rows per transaction: 50 tenants, names ``<model>-<n>`` over 20 model words,
one in 100,000 named ``needle-<n>``, statuses 90 % succeeded, 5 % failed, 3 % cancelled, 1 % running, 1 %
pending. Each figure is the median of ``--repeat`` runs on a warm cache (one warm-up call first); "before" runs
the old statements after dropping the indexes this change added. Then ``--insert`` submissions are stored the
service's way into a new store with and without what this change keeps per write.

    .venv/bin/python bench/history_scale.py [--jobs 1000000] [--dir /tmp/history-bench] [--repeat 5]
                                            [--insert 20000] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpucluster.service import store as store_mod
from gpucluster.service.store import Store

WORDS = ("llama", "bert", "resnet", "vit", "gpt", "t5", "whisper", "clip", "sdxl", "mixtral", "qwen", "yolo",
         "unet", "gemma", "phi", "falcon", "mistral", "bloom", "opt", "deberta")
STATUSES = (("succeeded", 0.90), ("failed", 0.05), ("cancelled", 0.03), ("running", 0.01), ("pending", 0.01))
RESOURCES = json.dumps({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100})
OPTIONS = json.dumps({"gpu_type": "", "node_selector": {}, "kind": "train", "preemptible": True, "ref_gpu": "",
                      "work_class": "", "speedup": {}, "tokens": 0.0})


def fill(store: Store, n: int, seed: int = 7) -> float:
    """``n`` jobs written through the store's connection (its triggers keep the counts and the text index);
    returns the seconds it took."""
    rng = random.Random(seed)
    names, weights = zip(*STATUSES, strict=True)
    t0 = time.perf_counter()
    db = store._db
    batch = 10_000
    for start in range(0, n, batch):
        rows = []
        for i in range(start, min(n, start + batch)):
            name = f"needle-{i}" if i % 100_000 == 50_000 else f"{WORDS[i % len(WORDS)]}-{i}"
            status = rng.choices(names, weights)[0]
            at = 1.7e9 + i * 0.5
            rows.append((f"j-{i:012x}", name, f"t{i % 50:02d}", 1, RESOURCES, 60.0, 0, status, "", at, at, OPTIONS,
                         float(i), 1.0, "[]"))
        with store._lock:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT INTO jobs(id, name, tenant, replicas, resources, duration_s, priority, status, "
                           "message, submitted_at, updated_at, options, submitted_t, gpus, placements) "
                           "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
            db.execute("COMMIT")
    return time.perf_counter() - t0


def insert_cost(root: Path, n: int, history: bool) -> float:
    """Microseconds per job of ``n`` submissions stored as the service stores them (``Store.insert_jobs``, a
    group commit of 50), into a new store with or (``history=False``) without the counts, the text index and the
    indexes led by status: what keeping the history cheap to read costs each write."""
    from gpucluster.jobs import Job, job_spec

    path = root / f"insert-{history}.db"
    store = Store(path)
    if not history:
        with store._lock:
            store._db.executescript("DROP TRIGGER jobs_counted; DROP TRIGGER jobs_recounted; DROP TRIGGER "
                                    "jobs_retexted; DROP TRIGGER jobs_uncounted; DROP TABLE job_counts; DROP TABLE "
                                    "jobs_text; DROP INDEX jobs_status_history; DROP INDEX "
                                    "jobs_tenant_status_history;")
    jobs = [Job(job_spec(f"j-{i:012x}", name=f"{WORDS[i % len(WORDS)]}-{i}", tenant=f"t{i % 50:02d}", replicas=1,
                         resources={"nvidia.com/gpu": 1}, duration_s=60.0, submit_s=0.0)) for i in range(n)]
    t0 = time.perf_counter()
    for start in range(0, n, 50):
        store.insert_jobs([(j, "admin", None) for j in jobs[start:start + 50]])
    us = (time.perf_counter() - t0) / n * 1e6
    store.close()
    for f in root.glob(f"insert-{history}.db*"):
        f.unlink()
    return us


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median milliseconds of ``repeat`` calls (after one warm-up) and the last result."""
    out = fn()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        runs.append((time.perf_counter() - t0) * 1000)
    return statistics.median(runs), out


def old_way(store: Store, where: list[str], args: list[Any], q: str | None, before: tuple[float, str] | None,
            limit: int) -> tuple[int, int]:
    """The page and count as the history read them before: ``COUNT(*)`` of the filtered rows, ``q`` by
    ``instr`` on every row, the cursor as ``submitted_at < ? OR (submitted_at = ? AND id < ?)``; the page's rows
    read back into jobs as ``Store.history`` does."""
    cond, params = list(where), list(args)
    if q:
        cond.append("(instr(name, ?) > 0 OR instr(id, ?) > 0)")
        params += [q, q]
    page_cond, page_args = list(cond), list(params)
    if before is not None:
        page_cond.append("(submitted_at < ? OR (submitted_at = ? AND id < ?))")
        page_args += [before[0], before[0], before[1]]
    w = f" WHERE {' AND '.join(cond)}" if cond else ""
    pw = f" WHERE {' AND '.join(page_cond)}" if page_cond else ""
    with store._lock:
        rows = store._db.execute(f"SELECT * FROM jobs{pw} ORDER BY submitted_at DESC, id DESC LIMIT ?",
                                 (*page_args, limit)).fetchall()
        total = int(store._db.execute(f"SELECT COUNT(*) FROM jobs{w}", params).fetchone()[0])
    return len([store_mod._job(r, None) for r in rows]), total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/history-bench"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--limit", type=int, default=50)
    ap.add_argument("--insert", type=int, default=20_000, help="submissions stored to measure the write cost "
                                                                "(0: skip)")
    ap.add_argument("--keep", action="store_true", help="reuse a store of the same size left by an earlier run")
    a = ap.parse_args()
    path = a.dir / f"jobs-{a.jobs}.db"
    if not a.keep and a.dir.exists():
        shutil.rmtree(a.dir)
    fresh = not path.exists()
    store = Store(path)
    if fresh:
        secs = fill(store, a.jobs)
        print(f"filled {a.jobs:,} jobs in {secs:.1f} s ({a.jobs / secs:,.0f} jobs/s, counts and text index kept "
              f"by the triggers)")
    size = sum(p.stat().st_size for p in a.dir.iterdir()) / 2**20
    print(f"store {path}: {size:,.0f} MiB; load average {os.getloadavg()[0]:.2f}; python {sys.version.split()[0]}")
    deep_i = a.jobs // 10  # 90 % of the way down the newest-first history
    deep = (1.7e9 + deep_i * 0.5, f"j-{deep_i:012x}")
    cases: list[tuple[str, dict[str, Any], list[str], list[Any]]] = [
        ("first page", {}, [], []),
        ("deep page (90 %)", {"before": deep}, [], []),
        ("tenant, deep", {"tenant": "t07", "before": deep}, ["tenant = ?"], ["t07"]),
        ("status=pending, deep", {"status": "pending", "before": deep}, ["status = ?"], ["pending"]),
        ("tenant+status=failed", {"tenant": "t07", "status": "failed"}, ["tenant = ?", "status = ?"],
         ["t07", "failed"]),
        ("q rare (needle)", {"q": "needle"}, [], []),
        ("q common (llama)", {"q": "llama"}, [], []),
        ("q rare + tenant", {"q": "needle", "tenant": "t00"}, ["tenant = ?"], ["t00"]),
        ("q one id", {"q": f"j-{deep_i:012x}"}, [], []),
    ]
    now: dict[str, tuple[float, int, int]] = {}
    for label, kw, _where, _args in cases:
        ms, (jobs, total) = timed(lambda kw=kw: store.history(limit=a.limit, **kw), a.repeat)
        now[label] = (ms, len(jobs), total)
    # the way it was, on the schema it had: without the indexes led by status (the counts and the text index are
    # not read by it)
    with store._lock:
        store._db.execute("DROP INDEX jobs_status_history")
        store._db.execute("DROP INDEX jobs_tenant_status_history")
    print(f"\n{'case':24} {'rows':>5} {'total':>9} {'now ms':>9} {'before ms':>10}")
    for label, kw, where, args in cases:
        old_ms, (old_rows, old_total) = timed(
            lambda kw=kw, where=where, args=args: old_way(store, where, args, kw.get("q"), kw.get("before"),
                                                          a.limit), max(1, min(a.repeat, 3)))
        ms, rows, total = now[label]
        assert (old_rows, old_total) == (rows, total), (label, old_rows, old_total, rows, total)
        print(f"{label:24} {rows:>5} {total:>9,} {ms:>9.2f} {old_ms:>10.1f}")
    store.close()
    if a.insert:
        with_us = insert_cost(a.dir, a.insert, True)
        without_us = insert_cost(a.dir, a.insert, False)
        print(f"\nstoring a submission ({a.insert:,} through insert_jobs, 50 a commit): {with_us:.0f} us a job with "
              f"the counts and text index, {without_us:.0f} us without")
    if not a.keep:
        shutil.rmtree(a.dir)


if __name__ == "__main__":
    main()
