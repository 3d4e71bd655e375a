"""A kind (``kind.x-k8s.io/v1alpha4``) cluster config that gives GPUs to workers the way nvkind does: each
GPU handed to a worker is an ``extraMounts`` entry ``/dev/null`` ->
``/var/run/nvidia-container-devices/cdi/runtime.nvidia.com/gpu/<index>`` (read by the NVIDIA container
runtime with ``accept-nvidia-visible-devices-as-volume-mounts``), and GPU workers carry the label
``nvidia.com/gpu.present: "true"``.

GPUs are split evenly over the workers (the first workers take one more when it does not divide), or
given as explicit lists, one per worker (``"0"``, ``"1,2,3"``, ``""`` for none, ``"all"``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml

CDI_PREFIX = "/var/run/nvidia-container-devices/cdi/runtime.nvidia.com/gpu"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
MAX_WORKERS = 256
"""Most worker nodes of a kind cluster we write a config for (each is a container on one host)."""
MAX_GPUS = 128
"""Most GPUs on the host (``--gpus``)."""
KIND_NAME = re.compile(r"[a-z0-9.-]+")
"""Cluster names kind accepts (its config validation: ``^[a-z0-9.-]+$``); it refuses others at create time."""


class KindConfigError(ValueError):
    """Bad kind-config input; the message names the option and why."""


def _parse_list(text: str, where: str, gpus: int) -> list[int]:
    text = text.strip()
    if text.lower() == "all":
        return list(range(gpus))
    out: list[int] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if "-" in part:
            lo, _, hi = part.partition("-")
            if not (lo.isdigit() and hi.isdigit()) or int(lo) > int(hi):
                raise KindConfigError(f"{where}: {part!r} is not a GPU index range like 2-5")
            if int(hi) >= gpus:  # before the range is built: '0-99999999999' is no list to make
                raise KindConfigError(f"{where}: GPU {int(hi)} does not exist (--gpus {gpus}: indices "
                                      f"0..{gpus - 1})")
            out += list(range(int(lo), int(hi) + 1))
        elif part.isdigit():
            out.append(int(part))
        else:
            raise KindConfigError(f"{where}: {part!r} is not a GPU index")
    for i in out:
        if i >= gpus:
            raise KindConfigError(f"{where}: GPU {i} does not exist (--gpus {gpus}: indices 0..{gpus - 1})")
    return out


def gpu_assignment(workers: int, gpus: int, per_worker: Sequence[str] | None = None) -> list[list[int]]:
    """GPU indices per worker."""
    if not 1 <= workers <= MAX_WORKERS:
        raise KindConfigError(f"--workers: must be within 1..{MAX_WORKERS}, got {workers}")
    if not 0 <= gpus <= MAX_GPUS:
        raise KindConfigError(f"--gpus: must be within 0..{MAX_GPUS}, got {gpus}")
    if per_worker:
        if len(per_worker) != workers:
            raise KindConfigError(
                f"--gpus-per-worker: given {len(per_worker)} times, expected once per worker ({workers})"
            )
        lists = [_parse_list(t, f"--gpus-per-worker[{i}]", gpus) for i, t in enumerate(per_worker)]
        seen: dict[int, int] = {}
        for w, idx in enumerate(lists):
            for g in idx:
                if g in seen and seen[g] != w:
                    raise KindConfigError(
                        f"--gpus-per-worker[{w}]: GPU {g} is already given to worker {seen[g]}"
                    )
                seen[g] = w
        return [sorted(set(x)) for x in lists]
    base, extra = divmod(gpus, workers)
    out: list[list[int]] = []
    start = 0
    for w in range(workers):
        n = base + (1 if w < extra else 0)
        out.append(list(range(start, start + n)))
        start += n
    return out


def kind_config(workers: int, gpus: int, per_worker: Sequence[str] | None = None,
                name: str = "gpucluster", image: str | None = None) -> dict[str, Any]:
    if not KIND_NAME.fullmatch(name):
        raise KindConfigError(f"--name {name!r}: not a kind cluster name (kind takes lower-case letters, digits, "
                              "'.' and '-' only)")
    assignment = gpu_assignment(workers, gpus, per_worker)
    control: dict[str, Any] = {"role": "control-plane"}
    if image:
        control["image"] = image
    nodes: list[dict[str, Any]] = [control]
    for idx in assignment:
        worker: dict[str, Any] = {"role": "worker"}
        if image:
            worker["image"] = image
        if idx:
            worker["labels"] = {GPU_PRESENT_LABEL: "true"}
            worker["extraMounts"] = [{"hostPath": "/dev/null", "containerPath": f"{CDI_PREFIX}/{i}"} for i in idx]
        nodes.append(worker)
    return {"kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4", "name": name, "nodes": nodes}


def kind_config_yaml(workers: int, gpus: int, per_worker: Sequence[str] | None = None,
                     name: str = "gpucluster", image: str | None = None) -> str:
    return yaml.safe_dump(kind_config(workers, gpus, per_worker, name, image), sort_keys=False)
