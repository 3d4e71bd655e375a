"""Job traces by name: ``FORMAT:PATH`` (or ``synthetic:N[:PROFILE[:LOAD]]``) -> job specs, one loader per format.

What ``gpucluster simulate`` and ``whatif`` accept as ``--trace`` (and the benchmarks replay): ``philly-gavel``
(:mod:`~gpucluster.simulator.traces.philly`), ``alibaba-openb`` (:mod:`~gpucluster.simulator.traces.alibaba_online`),
``tiresias`` (:mod:`~gpucluster.simulator.traces.tiresias`), ``jobs`` (:mod:`~gpucluster.simulator.traces.jobs`)
and ``synthetic`` (:mod:`~gpucluster.simulator.traces.synthetic`, sized on the cluster it will run on).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

from gpucluster.jobs import JobSpec, default_speed_model
from gpucluster.simulator.traces import TraceError
from gpucluster.spec import Cluster

TRACE_FORMATS = ("philly-gavel", "alibaba-openb", "tiresias", "jobs", "synthetic")


def load_trace(trace: str, cluster: Cluster, seed: int = 0, notes: list[str] | None = None) -> list[JobSpec]:
    """``FORMAT:PATH`` (or ``synthetic:N[:PROFILE[:LOAD]]``) -> job specs; raises TraceError. ``notes`` gets a
    line for what a loader left out by design (an openb list's CPU-only pods and pods that never ran), so that
    the caller can say so: nothing is dropped silently."""
    fmt, sep, arg = trace.partition(":")
    if not sep or not arg:
        raise TraceError(f"--trace {trace!r}: expected FORMAT:PATH with FORMAT one of {', '.join(TRACE_FORMATS)}")
    if fmt == "philly-gavel":
        from gpucluster.simulator.traces.philly import load_philly

        return load_philly(Path(arg))
    if fmt == "jobs":
        from gpucluster.simulator.traces.jobs import load_jobs

        return load_jobs(Path(arg))
    if fmt == "tiresias":
        from gpucluster.simulator.traces.tiresias import load_tiresias

        return load_tiresias(Path(arg))
    if fmt == "alibaba-openb":
        from gpucluster.simulator.traces.alibaba_online import OpenbSkipped, load_openb_jobs

        skipped = OpenbSkipped()
        jobs = load_openb_jobs(Path(arg), skipped)
        if notes is not None and (skipped.cpu_only or skipped.never_ran):
            notes.append(f"{arg}: left out {skipped.cpu_only:,} CPU-only pods (num_gpu 0) and {skipped.never_ran:,} "
                         f"that never ran (deletion_time <= creation_time); {len(jobs):,} GPU pods are the jobs")
        if notes is not None and skipped.ran_to_end:
            notes.append(f"{arg}: {skipped.ran_to_end:,} GPU pods have no deletion_time (still there when the trace "
                         f"ended): they run until the trace's end, t={skipped.end_s:,.0f} s")
        return jobs
    if fmt == "synthetic":
        from gpucluster.simulator.traces.synthetic import DEFAULT_PROFILE, generate

        parts = arg.split(":")
        if len(parts) > 3:  # a fourth field was dropped without a word
            raise TraceError(f"--trace {trace!r}: expected synthetic:N[:PROFILE[:LOAD]]; "
                             f"{':'.join(parts[3:])!r} is one field too many")
        try:
            n = int(parts[0])
            load = float(parts[2]) if len(parts) > 2 else 0.7
        except ValueError:
            raise TraceError(f"--trace {trace!r}: expected synthetic:N[:PROFILE[:LOAD]] with N a whole number "
                             "and LOAD a number") from None
        gpus = sum(len(n_.devices) for n_ in cluster.nodes)
        return generate(n, gpus, profile=parts[1] if len(parts) > 1 else DEFAULT_PROFILE, load=load, seed=seed,
                        ref_gpu=main_gpu_model(cluster))
    raise TraceError(f"--trace {trace!r}: unknown format {fmt!r}; known: {', '.join(TRACE_FORMATS)}")


def main_gpu_model(cluster: Cluster) -> str:
    """The cluster's most common GPU model ('' without GPUs): what a synthetic trace's run times are on."""
    counts = Counter(d.model for n in cluster.nodes for d in n.devices)
    return counts.most_common(1)[0][0] if counts else ""


def with_ref_gpu(jobs: list[JobSpec], ref_gpu: str | None) -> list[JobSpec]:
    """Jobs that name no ``ref_gpu`` get ``ref_gpu`` (a ``--ref-gpu`` flag); raises TraceError for an unknown
    model."""
    if not ref_gpu:
        return jobs
    if default_speed_model().catalog.resolve(ref_gpu) is None:
        known = ", ".join(sorted(default_speed_model().catalog.gpus))
        raise TraceError(f"--ref-gpu: unknown GPU model {ref_gpu!r}; known: {known}")
    return [j if j.ref_gpu else replace(j, ref_gpu=ref_gpu) for j in jobs]
