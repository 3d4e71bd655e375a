"""The GPU performance catalog (``data/gpu_perf.yaml``): loading, validation and name lookup.

The file holds facts (peak throughput per precision, memory, links, power, each with its public source) and the
speed model's work classes. :func:`load_perf_catalog` validates both and raises :class:`PerfCatalogError`, whose
message names the file, the entry and the field: ``gpu_perf.yaml: gpus.L40S-48GB.fp32_tflops.source: unknown
source 'nv-l40z'; known: ...``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpucluster.perf.speed import PRECISIONS, GpuPerf, Precision, WorkClass

BUNDLED = "gpu_perf.yaml"
_SHARE_TOLERANCE = 1e-6


class PerfCatalogError(ValueError):
    """Bad performance catalog. ``str(err)`` is ``FILE: path.to.field: why`` (one line per problem)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("\n".join(f"{where}: {why}" for where, why in problems))


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Basis = Literal["datasheet", "derived", "estimate", "calibrated"]


class Figure(_M):
    """One published (or derived / estimated) number and where it comes from."""

    value: Annotated[float, Field(ge=0)] | None
    """The figure; ``null`` = the GPU has no such path (e.g. FP8 before Hopper/Ada)."""
    source: str = Field(min_length=1)
    """Key into ``sources``."""
    basis: Basis = "datasheet"
    """datasheet (printed as is), derived (arithmetic on a printed figure), estimate, calibrated."""
    note: str = ""
    """How a derived figure was computed, or what an estimate assumes."""


class RequiredFigure(Figure):
    value: Annotated[float, Field(gt=0)]


class LinkFigure(Figure):
    value: Annotated[float, Field(ge=0)]


class GpuEntry(_M):
    """One GPU model's performance facts."""

    vendor: Literal["nvidia", "cambricon", "hygon"]
    architecture: str = Field(min_length=1)
    form_factor: Literal["sxm", "pcie"]
    aliases: list[str] = Field(default_factory=list)
    """Other names people and device plugins use (HAMi device types, nvidia-smi names, short names)."""
    memory_gb: RequiredFigure
    memory_bw_gbs: RequiredFigure
    fp32_tflops: RequiredFigure
    tf32_tflops: Figure
    bf16_tflops: Figure
    """BF16 dense tensor throughput, or FP16 where the GPU has no BF16."""
    fp8_tflops: Figure
    int8_tops: Figure
    nvlink_gbs: LinkFigure
    """GPU-to-GPU link per GPU, both directions (NVLink, MLU-Link); 0 = none."""
    pcie_gbs: RequiredFigure
    tdp_w: RequiredFigure
    sustained: RequiredFigure | None = None
    """Fraction of the peak kept up under long load (default 1.0)."""

    @model_validator(mode="after")
    def _sustained_at_most_one(self) -> GpuEntry:
        if self.sustained is not None and self.sustained.value > 1.0:
            raise ValueError("sustained: must be <= 1 (a fraction of the peak)")
        return self

    def figures(self) -> Iterator[tuple[str, Figure]]:
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, Figure):
                yield name, value


class WorkloadEntry(_M):
    """One work class of the speed model (see docs/gpu-speed.md)."""

    kind: Literal["training", "inference"]
    anchor: str = Field(min_length=1)
    """GPU the shares are measured (or assumed) on."""
    precision: Precision
    compute: Annotated[float, Field(ge=0, le=1)]
    memory: Annotated[float, Field(ge=0, le=1)]
    host: Annotated[float, Field(ge=0, le=1)]
    match: str = ""
    """Case-insensitive regular expression over job model names."""
    default_for: Literal["training", "inference"] | None = None
    source: str = Field(min_length=1)
    note: str = ""

    @model_validator(mode="after")
    def _shares_add_up(self) -> WorkloadEntry:
        total = self.compute + self.memory + self.host
        if abs(total - 1.0) > _SHARE_TOLERANCE:
            raise ValueError(f"compute + memory + host must be 1, not {total:g}")
        if self.match:
            try:
                re.compile(self.match)
            except re.error as exc:
                raise ValueError(f"match: not a regular expression: {exc}") from None
        return self


class _CatalogFile(_M):
    version: Literal[1]
    sources: dict[str, str] = Field(min_length=1)
    gpus: dict[str, GpuEntry] = Field(min_length=1)
    workloads: dict[str, WorkloadEntry] = Field(min_length=1)


def normalize_name(name: str) -> str:
    """Lower case, spaces/underscores as dashes, vendor prefixes (``NVIDIA-``, ``Tesla ``) dropped."""
    key = re.sub(r"[\s_]+", "-", name.strip().lower())
    changed = True
    while changed:
        changed = False
        for prefix in ("nvidia-", "tesla-"):
            if key.startswith(prefix) and len(key) > len(prefix):
                key = key[len(prefix):]
                changed = True
    return key


@dataclass(frozen=True, slots=True)
class PerfCatalog:
    """The validated catalog: GPUs by canonical name, work classes by name, sources by key."""

    gpus: Mapping[str, GpuPerf]
    entries: Mapping[str, GpuEntry]
    workloads: Mapping[str, WorkClass]
    sources: Mapping[str, str]
    where: str
    _names: Mapping[str, str]
    _matchers: tuple[tuple[str, str, re.Pattern[str]], ...]
    _defaults: Mapping[str, str]

    def resolve(self, name: str) -> str | None:
        """Canonical name for a canonical name, alias or device-plugin type string; None when unknown."""
        return self._names.get(normalize_name(name))

    def find(self, name: str) -> GpuPerf | None:
        canonical = self.resolve(name)
        return None if canonical is None else self.gpus[canonical]

    def gpu(self, name: str) -> GpuPerf:
        """The GPU by any of its names. Raises KeyError naming the known models."""
        found = self.find(name)
        if found is None:
            raise KeyError(f"unknown GPU model {name!r}; known: {', '.join(sorted(self.gpus))}")
        return found

    def work_class(self, name: str) -> WorkClass:
        try:
            return self.workloads[name]
        except KeyError:
            raise KeyError(f"unknown work class {name!r}; known: {', '.join(sorted(self.workloads))}") from None

    def classify(self, kind: str, model: str = "") -> WorkClass:
        """The work class of a job of this kind (training | inference) and model name (first match wins)."""
        for cls_kind, name, pattern in self._matchers:
            if cls_kind == kind and model and pattern.search(model):
                return self.workloads[name]
        if kind not in self._defaults:
            raise KeyError(f"unknown job kind {kind!r}; known: {', '.join(sorted(self._defaults))}")
        return self.workloads[self._defaults[kind]]


def _gpu_perf(name: str, e: GpuEntry) -> GpuPerf:
    return GpuPerf(
        name=name, vendor=e.vendor, architecture=e.architecture,
        fp32=e.fp32_tflops.value, tf32=e.tf32_tflops.value, bf16=e.bf16_tflops.value,
        fp8=e.fp8_tflops.value, int8=e.int8_tops.value,
        memory_gb=e.memory_gb.value, memory_bw_gbs=e.memory_bw_gbs.value,
        nvlink_gbs=e.nvlink_gbs.value, pcie_gbs=e.pcie_gbs.value, tdp_w=e.tdp_w.value,
        sustained=e.sustained.value if e.sustained is not None else 1.0,
    )


def _check_references(raw: _CatalogFile) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    known_sources = f"known: {', '.join(sorted(raw.sources))}"
    known_gpus = f"known: {', '.join(sorted(raw.gpus))}"
    names: dict[str, str] = {}
    for gname, entry in raw.gpus.items():
        for field, fig in entry.figures():
            if fig.source not in raw.sources:
                problems.append((f"gpus.{gname}.{field}.source", f"unknown source {fig.source!r}; {known_sources}"))
        if entry.bf16_tflops.value is not None and entry.bf16_tflops.value < entry.fp32_tflops.value:
            problems.append((f"gpus.{gname}.bf16_tflops", "below fp32_tflops: a 16-bit path is never slower"))
        for alias in (gname, *entry.aliases):
            key = normalize_name(alias)
            other = names.setdefault(key, gname)
            if other != gname:
                problems.append((f"gpus.{gname}.aliases", f"{alias!r} already names {other}"))
    defaults: dict[str, str] = {}
    for wname, w in raw.workloads.items():
        where = f"workloads.{wname}"
        if w.source not in raw.sources:
            problems.append((f"{where}.source", f"unknown source {w.source!r}; {known_sources}"))
        if normalize_name(w.anchor) not in names:
            problems.append((f"{where}.anchor", f"unknown GPU model {w.anchor!r}; {known_gpus}"))
        if w.default_for is not None:
            if w.default_for != w.kind:
                problems.append((f"{where}.default_for", f"must equal the class's kind {w.kind!r}"))
            elif w.default_for in defaults:
                problems.append((f"{where}.default_for", f"{defaults[w.default_for]} is already the {w.kind} default"))
            else:
                defaults[w.default_for] = wname
    problems += [("workloads", f"no class has default_for: {kind}")
                 for kind in ("training", "inference") if kind not in defaults]
    return problems


def build_catalog(data: Any, where: str) -> PerfCatalog:
    """Validate parsed YAML and build the catalog. Raises PerfCatalogError."""
    try:
        raw = _CatalogFile.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"] if x not in ("function-after",)) or "(top level)"
            msg = err["msg"].removeprefix("Value error, ")
            problems.append((f"{where}: {loc}", msg))
        raise PerfCatalogError(problems) from None
    problems = _check_references(raw)
    if problems:
        raise PerfCatalogError([(f"{where}: {f}", w) for f, w in problems])
    gpus = {name: _gpu_perf(name, e) for name, e in raw.gpus.items()}
    names = {normalize_name(a): name for name, e in raw.gpus.items() for a in (name, *e.aliases)}
    workloads: dict[str, WorkClass] = {}
    for wname, w in raw.workloads.items():
        anchor = gpus[names[normalize_name(w.anchor)]]
        workloads[wname] = WorkClass(wname, w.kind, anchor, w.precision, w.compute, w.memory, w.host)
    matchers = tuple((w.kind, wname, re.compile(w.match, re.IGNORECASE))
                     for wname, w in raw.workloads.items() if w.match)
    defaults: dict[str, str] = {w.default_for: wname for wname, w in raw.workloads.items() if w.default_for is not None}
    return PerfCatalog(gpus, dict(raw.gpus), workloads, dict(raw.sources), where, names, matchers, defaults)


def load_perf_catalog(path: str | Path | None = None) -> PerfCatalog:
    """The bundled catalog, or a user's file. Raises PerfCatalogError naming the file, entry and field."""
    if path is None:
        text = resources.files("gpucluster.perf").joinpath(f"data/{BUNDLED}").read_text("utf-8")
        where = BUNDLED
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise PerfCatalogError([(str(path), f"cannot read: {exc.strerror}")]) from None
        where = str(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PerfCatalogError([(where, f"not valid YAML: {exc}")]) from None
    if not isinstance(data, dict):
        raise PerfCatalogError([(where, "must be a mapping with version, sources, gpus, workloads")])
    return build_catalog(data, where)


__all__ = [
    "BUNDLED",
    "PRECISIONS",
    "Figure",
    "GpuEntry",
    "PerfCatalog",
    "PerfCatalogError",
    "WorkloadEntry",
    "build_catalog",
    "load_perf_catalog",
    "normalize_name",
]
