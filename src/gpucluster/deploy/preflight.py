"""Preflight checks for a GPU kind cluster: docker, kind, kubectl, helm (optional), the NVIDIA driver (>= 384.81), the
NVIDIA container runtime and the Kubernetes version (>= 1.16). Each check says what it found, what it
needs and how to fix it. Commands run with a timeout; a missing tool is a failed check, never a crash."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

MIN_DRIVER = (384, 81)
MIN_KUBERNETES = (1, 16)

Runner = Callable[[Sequence[str]], tuple[int, str]]


def run_command(argv: Sequence[str], timeout: float = 15.0) -> tuple[int, str]:
    """Run ``argv``; (exit code, stdout + stderr). 127 when the program is not on PATH."""
    if shutil.which(argv[0]) is None:
        return 127, f"{argv[0]}: not found on PATH"
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return 124, f"{' '.join(argv)}: timed out after {timeout:.0f}s"
    except OSError as exc:
        return 126, f"{argv[0]}: {exc.strerror}"
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def parse_version(text: str) -> tuple[int, ...] | None:
    m = re.search(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    return tuple(int(x) for x in m.groups() if x is not None)


def _fmt(v: tuple[int, ...] | None) -> str:
    return ".".join(str(x) for x in v) if v else "?"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    found: str
    need: str = ""
    fix: str = ""


@dataclass(slots=True)
class PreflightReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def missing(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def text(self) -> str:
        lines = []
        for c in self.checks:
            mark = "ok     " if c.ok else "MISSING"
            need = f" (need {c.need})" if c.need else ""
            lines.append(f"[{mark}] {c.name}: {c.found}{need}")
            if not c.ok and c.fix:
                lines.append(f"          fix: {c.fix}")
        lines.append("all checks passed" if self.ok else f"{len(self.missing)} check(s) failed")
        return "\n".join(lines)


def _tool(run: Runner, name: str, argv: Sequence[str], fix: str,
          minimum: tuple[int, ...] | None = None) -> tuple[Check, tuple[int, ...] | None]:
    code, out = run(argv)
    if code == 127:
        return Check(name, False, "not installed", _fmt(minimum) if minimum else "", fix), None
    if code != 0:
        first = out.splitlines()[0] if out else f"exit code {code}"
        return Check(name, False, f"`{' '.join(argv)}` failed: {first}", "", fix), None
    version = parse_version(out)
    if minimum and (version is None or version < minimum):
        return Check(name, False, f"version {_fmt(version)}", f">= {_fmt(minimum)}", fix), version
    return Check(name, True, f"version {_fmt(version)}", f">= {_fmt(minimum)}" if minimum else ""), version


def run_preflight(run: Runner = run_command) -> PreflightReport:
    rep = PreflightReport()
    docker, _ = _tool(run, "docker", ["docker", "version", "--format", "{{.Server.Version}}"],
                      "install Docker Engine (https://docs.docker.com/engine/install/) and start it; "
                      "add your user to the docker group")
    rep.checks.append(docker)
    rep.checks.append(_tool(run, "kind", ["kind", "version"],
                            "go install sigs.k8s.io/kind@latest (or download from https://kind.sigs.k8s.io)")[0])
    kubectl_code, kubectl_out = run(["kubectl", "version", "--client", "-o", "json"])
    if kubectl_code == 127:
        rep.checks.append(Check("kubectl", False, "not installed", "",
                                "install kubectl (https://kubernetes.io/docs/tasks/tools/)"))
    else:
        rep.checks.append(Check("kubectl", kubectl_code == 0,
                                f"version {_fmt(parse_version(kubectl_out))}" if kubectl_code == 0
                                else "`kubectl version --client` failed", "", "reinstall kubectl"))
    helm, _ = _tool(run, "helm", ["helm", "version", "--short"],
                    "install helm 3 (https://helm.sh/docs/intro/install/)", (3, 0))
    if helm.found == "not installed":
        # optional: the chart is one of three ways to the same objects (docs/deploy.md)
        helm = Check("helm", True, "not installed (optional: `kubectl apply -k deploy/kustomize/overlays/"
                                   "extender` or `gpucluster k8s manifests | kubectl apply -f -` need no helm)")
    rep.checks.append(helm)
    rep.checks.append(_tool(
        run, "NVIDIA driver", ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        "install the NVIDIA driver >= 384.81 for your GPU (https://www.nvidia.com/Download/index.aspx)",
        MIN_DRIVER)[0])
    # container runtime: the NVIDIA runtime registered with docker (nvidia-ctk runtime configure)
    fix_rt = ("install nvidia-container-toolkit, then: sudo nvidia-ctk runtime configure --runtime=docker "
              "--set-as-default --cdi.enabled; set accept-nvidia-visible-devices-as-volume-mounts = true in "
              "/etc/nvidia-container-runtime/config.toml; sudo systemctl restart docker")
    ctk_code, _ = run(["nvidia-ctk", "--version"])
    if not docker.ok:
        rep.checks.append(Check("container runtime", False, "docker is not available", "nvidia runtime", fix_rt))
    else:
        code, out = run(["docker", "info", "--format", "{{json .Runtimes}} {{.DefaultRuntime}}"])
        has_nvidia = code == 0 and '"nvidia"' in out
        found = ("nvidia runtime registered" if has_nvidia else "no nvidia runtime in `docker info`") + (
            "" if ctk_code == 0 else "; nvidia-ctk not installed")
        rep.checks.append(Check("container runtime", has_nvidia and ctk_code == 0, found, "nvidia runtime",
                                fix_rt))
    # Kubernetes version: the server's when one answers, else the kubectl client's
    code, out = run(["kubectl", "version", "-o", "json"])
    version: tuple[int, ...] | None = None
    source = "server"
    try:
        info = json.JSONDecoder().raw_decode(out[out.index("{"):])[0] if "{" in out else {}
    except json.JSONDecodeError:
        info = {}
    server = (info.get("serverVersion") or {}).get("gitVersion")
    client = (info.get("clientVersion") or {}).get("gitVersion")
    if server:
        version = parse_version(str(server))
    elif client:
        version, source = parse_version(str(client)), "kubectl client (no cluster reachable)"
    if version is None:
        why = "kubectl missing" if code == 127 else "`kubectl version` gave no version"
        rep.checks.append(Check("Kubernetes", False, f"unknown ({why})", ">= 1.16",
                                "install kubectl; create the cluster with kind"))
    else:
        ok = version >= MIN_KUBERNETES
        rep.checks.append(Check("Kubernetes", ok, f"version {_fmt(version)} ({source})", ">= 1.16",
                                "" if ok else "use a kind node image >= v1.16 (kind create cluster --image ...)"))
    return rep
