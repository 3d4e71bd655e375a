"""Requirements (what the user asks for) as pydantic models, and the errors that name a field."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpucluster import inputfile
from gpucluster.design import catalog
from gpucluster.model.limits import MAX_DEVICES_PER_NODE, MAX_LINK_GBPS, MAX_NODES


class DesignError(ValueError):
    """A requirement the design cannot meet; ``field`` is the dotted path that caused it."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


class RequirementsError(ValueError):
    """One or more invalid fields; ``problems`` holds (field.path, why) pairs."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{f}: {w}" for f, w in problems))
        self.problems = problems


_PSU_RE = re.compile(r"^\s*(\d+)\s*[xX*]\s*(\d+(?:\.\d+)?)\s*(?:[wW])?\s*(?::\s*(\d+)\s*\+\s*(\d+))?\s*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class FabricReq(_Strict):
    """The compute (east-west) fabric."""

    type: Literal["infiniband", "roce"] = Field(
        "infiniband", description="infiniband (lower latency) or roce (RoCEv2 over Ethernet)."
    )
    switch_ports: int = Field(64, ge=4, le=512, description="Switch radix k (ports per switch).")
    link_gbps: int = Field(400, gt=0, le=MAX_LINK_GBPS, description="Node port speed in Gb/s (NDR / 400GbE = 400).")
    rail_optimized: bool | None = Field(
        None,
        description="Rail-optimised: NIC i of every server in a scalable unit goes to leaf i. "
        "Default: yes for training GPUs, no for inference GPUs.",
    )
    oversubscription: float = Field(
        1.0, ge=1.0, le=16.0, description="Leaf downlinks : uplinks (1 = non-blocking)."
    )
    nics_per_server: int | None = Field(
        None, ge=1, le=32, description="Compute-fabric ports per server; default one per GPU."
    )
    reserved_slots: int = Field(
        0, ge=0, le=MAX_NODES, description="Node slots of the first scalable unit kept for fabric managers (UFM)."
    )
    ufm_ports: int = Field(
        0, ge=0, le=MAX_NODES, description="Compute-fabric ports used by the fabric-manager appliances in total."
    )

    @model_validator(mode="after")
    def _even_radix(self) -> FabricReq:
        if self.switch_ports % 2:
            raise ValueError("switch_ports: must be even (half down, half up at 1:1)")
        return self


class StorageReq(_Strict):
    """The storage layer: distributed NVMe with a parallel file system, on its own network."""

    capacity_tb: float = Field(0.0, ge=0.0, le=1e7, description="Usable capacity to provide (TB).")
    read_gbs_per_gpu: float = Field(
        0.0, ge=0.0, le=1e4, description="Sustained read bandwidth each GPU needs (GB/s)."
    )
    ports_per_server: int = Field(2, ge=0, le=8, description="Storage-network ports per GPU server.")
    link_gbps: int = Field(200, gt=0, le=MAX_LINK_GBPS, description="Storage-network port speed (Gb/s).")
    switch_ports: int = Field(64, ge=4, le=512, description="Storage switch radix.")


class PowerReq(_Strict):
    """Power supplies, racks and the facility."""

    psu: str = Field(
        "auto",
        description="PSUs per server as COUNTxWATTS[:ACTIVE+REDUNDANT], e.g. 2x2200 (1+1 implied) "
        "or 6x3300:4+2; 'auto' = the platform's vendor configuration.",
    )
    rack_power_kw: float = Field(42.0, gt=0.0, le=10_000.0, description="Power a rack may draw (kW).")
    rack_units: int = Field(42, ge=4, le=60, description="Rack height (U).")
    reserved_units: int = Field(
        4, ge=0, le=60, description="U per compute rack kept for PDUs, patch panels, OOB switch."
    )
    pue: float = Field(1.3, ge=1.0, le=3.0, description="Power usage effectiveness of the site.")
    electricity_usd_per_kwh: float = Field(0.10, ge=0.0, le=100.0, description="Electricity price ($/kWh).")
    average_load: float = Field(
        0.7, gt=0.0, le=1.0, description="Average IT load as a fraction of maximum, for energy cost."
    )
    server_overhead_w: float | None = Field(
        None, ge=0.0, le=1e6, description="Override the platform's non-GPU power per server (W)."
    )

    @model_validator(mode="after")
    def _psu_form(self) -> PowerReq:
        if self.psu != "auto":
            parse_psu(self.psu)  # raises ValueError with a reason
        return self


class CostReq(_Strict):
    """Cost model inputs."""

    price_catalog: str | None = Field(
        None, description="Path to a price catalog YAML; default: the bundled estimates."
    )
    years: float = Field(3.0, gt=0.0, le=20.0, description="Horizon for power and cloud totals.")


class ManagementReq(_Strict):
    """Control-plane servers and management networks."""

    servers: int = Field(5, ge=0, le=10_000, description="Head / management servers (K8s control plane etc.).")
    inband_switch_ports: int = Field(64, ge=4, le=1024, description="In-band management switch radix.")
    oob_switch_ports: int = Field(48, ge=4, le=1024, description="Out-of-band (BMC) switch ports.")


class Requirements(_Strict):
    """What the cluster must be. Give exactly one of servers, gpus or power_budget_kw."""

    name: str = Field("cluster", min_length=1, max_length=63, description="Cluster name (used in the spec).")
    gpu: str = Field(..., max_length=64, description="GPU model, canonical name or alias (H100, L40S, ...).")
    gpus_per_server: int | None = Field(
        None, gt=0, le=MAX_DEVICES_PER_NODE, description="GPUs per server; default the platform's maximum (8 for SXM)."
    )
    servers: int | None = Field(None, gt=0, le=MAX_NODES, description="Number of GPU servers.")
    gpus: int | None = Field(None, gt=0, le=MAX_NODES * 8, description="Number of GPUs (rounded up to servers).")
    power_budget_kw: float | None = Field(
        None, gt=0.0, le=200_000.0, description="Facility power budget (kW, PUE included): fit as many as possible."
    )
    fabric: FabricReq = Field(default_factory=FabricReq, description="Compute fabric.")
    storage: StorageReq = Field(default_factory=StorageReq, description="Storage layer.")
    power: PowerReq = Field(default_factory=PowerReq, description="Power and racks.")
    cost: CostReq = Field(default_factory=CostReq, description="Cost inputs.")
    management: ManagementReq = Field(
        default_factory=ManagementReq, description="Management layer."
    )

    @model_validator(mode="after")
    def _check(self) -> Requirements:
        given = [n for n in ("servers", "gpus", "power_budget_kw") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(
                "servers: give exactly one of servers, gpus, power_budget_kw"
                + (f" (got {', '.join(given)})" if given else "")
            )
        try:
            gpu = catalog.lookup_gpu(self.gpu)
        except KeyError:
            raise ValueError(
                f"gpu: unknown GPU model {self.gpu!r}; known: {', '.join(catalog.known_gpu_names())}"
            ) from None
        if self.gpus_per_server is not None and self.gpus_per_server > gpu.max_per_server:
            raise ValueError(
                f"gpus_per_server: {gpu.name} servers take at most {gpu.max_per_server} GPUs"
            )
        return self


def parse_psu(text: str) -> tuple[int, float, int]:
    """'2x2200' -> (2, 2200.0, 1 redundant); '6x3300:4+2' -> (6, 3300.0, 2).

    Without an explicit ACTIVE+REDUNDANT the split is N+N (half the PSUs redundant), which is
    what "2x2200 W redundant" means.
    """
    m = _PSU_RE.match(text)
    if not m:
        raise ValueError(f"psu: {text!r} is not COUNTxWATTS[:ACTIVE+REDUNDANT] (e.g. 2x2200)")
    count, watts = int(m.group(1)), float(m.group(2))
    if count < 1 or watts <= 0:
        raise ValueError(f"psu: {text!r} needs at least one PSU of positive wattage")
    if m.group(3) is None:
        return count, watts, count // 2
    active, redundant = int(m.group(3)), int(m.group(4))
    if active + redundant != count or active < 1:
        raise ValueError(f"psu: {active}+{redundant} does not add up to {count} PSUs (need >= 1 active)")
    return count, watts, redundant


def _why(err: Any) -> tuple[str, str]:
    """Turn one pydantic error into (field.path, why), with short 'must be > 0' wording."""
    loc = ".".join(str(p) for p in err["loc"])
    ctx = err.get("ctx") or {}
    kind = err["type"]
    if kind == "value_error":
        msg = str(ctx.get("error", err["msg"]))
        head, sep, rest = msg.partition(": ")
        if sep and re.fullmatch(r"[a-z_]+", head):
            return (f"{loc}.{head}" if loc else head), rest
        return loc or "requirements", msg
    simple: dict[str, Callable[[], str]] = {
        "greater_than": lambda: f"must be > {ctx.get('gt')}",
        "greater_than_equal": lambda: f"must be >= {ctx.get('ge')}",
        "less_than_equal": lambda: f"must be <= {ctx.get('le')}",
        "less_than": lambda: f"must be < {ctx.get('lt')}",
        "extra_forbidden": lambda: "unknown field",
        "missing": lambda: "required",
        "literal_error": lambda: f"must be {ctx.get('expected')}",
    }
    why = simple[kind]() if kind in simple else str(err["msg"]).lower()
    return loc or "requirements", why


def format_validation_error(exc: ValidationError) -> list[tuple[str, str]]:
    """All problems of a ValidationError as (field.path, why)."""
    return [_why(e) for e in exc.errors()]


def parse_requirements(data: Any) -> Requirements:
    """Validate a mapping; raises RequirementsError naming each bad field."""
    if not isinstance(data, dict):
        raise RequirementsError([("requirements", "must be a mapping")])
    try:
        return Requirements.model_validate(data)
    except ValidationError as exc:
        raise RequirementsError(format_validation_error(exc)) from None


def load_requirements(path: str | Path) -> Requirements:
    """Read a requirements YAML file; RequirementsError on bad content, OSError if unreadable."""
    try:
        data = inputfile.load_yaml(path)
    except inputfile.InputFileError as exc:
        raise RequirementsError([("requirements", str(exc))]) from None
    return parse_requirements(data)
