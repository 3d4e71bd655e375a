"""The user-editable price catalog (estimates): loading and validation."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpucluster import inputfile
from gpucluster.design.requirements import RequirementsError, format_validation_error


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SwitchPrice(_M):
    """Price and typical power of one switch model."""

    price_usd: float = Field(..., ge=0, description="Price per switch (USD).")
    power_w: float = Field(..., ge=0, description="Typical power draw (W).")


class StorageNodePrice(_M):
    """One storage node of the parallel file system."""

    price_usd: float = Field(..., ge=0, description="Price per node (USD).")
    usable_tb: float = Field(..., gt=0, description="Usable capacity per node (TB).")
    read_gbs: float = Field(..., gt=0, description="Read bandwidth per node (GB/s).")
    power_w: float = Field(..., ge=0, description="Power per node (W).")
    height_u: int = Field(..., gt=0, description="Rack units per node.")
    ports: int = Field(..., ge=1, description="Storage-network ports per node.")


class BoxPrice(_M):
    """A priced box with power and height (management server, UFM appliance)."""

    price_usd: float = Field(..., ge=0, description="Price (USD).")
    power_w: float = Field(0, ge=0, description="Power (W).")
    height_u: int = Field(1, gt=0, description="Rack units.")


class RackPrice(_M):
    """A rack with its PDUs."""

    price_usd: float = Field(..., ge=0, description="Price per rack (USD).")


class CloudOffer(_M):
    """One cloud instance type in one region."""

    provider: str = Field(..., description="Cloud provider.")
    region: str = Field(..., description="Region name.")
    instance: str = Field(..., description="Instance type.")
    gpus: int = Field(..., gt=0, description="GPUs per instance.")
    on_demand_usd_per_hour: float = Field(..., gt=0, description="On-demand price per hour.")
    spot_discount: float = Field(0.0, ge=0, lt=1, description="Spot discount (fraction off).")


class Switches(_M):
    """Switch prices by model, plus a per-port fallback."""

    model_config = ConfigDict(extra="allow", frozen=True)
    generic_per_port_usd: float = Field(500, ge=0, description="Price per port of unlisted switches.")
    generic_power_w_per_port: float = Field(18, ge=0, description="Power per port of unlisted switches.")

    def for_model(self, name: str, ports: int) -> SwitchPrice:
        extra = self.model_extra or {}
        if name in extra:
            raw = extra[name]
            return raw if isinstance(raw, SwitchPrice) else SwitchPrice.model_validate(raw)
        return SwitchPrice(price_usd=ports * self.generic_per_port_usd,
                           power_w=ports * self.generic_power_w_per_port)


class PriceCatalog(_M):
    """All prices are editable estimates in USD."""

    currency: str = Field("USD", description="Currency of every price.")
    platforms: dict[str, float] = Field(..., description="Server platform price without GPUs.")
    gpus: dict[str, float] = Field(..., description="Price per GPU by canonical model name.")
    switches: Switches = Field(..., description="Switch prices and power.")
    cables: dict[str, float] = Field(..., description="Price per cable by reach class dac/aoc/smf.")
    storage_node: StorageNodePrice = Field(..., description="Storage node.")
    management_server: BoxPrice = Field(..., description="Management server.")
    ufm_appliance: BoxPrice = Field(..., description="Fabric-manager appliance.")
    rack: RackPrice = Field(..., description="Rack with PDUs.")
    cloud: dict[str, list[CloudOffer]] = Field(default_factory=dict, description="Cloud offers by GPU.")


def load_price_catalog(path: str | Path | None = None) -> PriceCatalog:
    """The bundled default catalog, or a user's file. RequirementsError names bad fields."""
    if path is None:
        text = resources.files("gpucluster.design").joinpath("data/prices.yaml").read_text("utf-8")
        where = "prices.yaml"
    else:
        try:
            text = inputfile.read_text(Path(path))
        except inputfile.InputFileError as exc:
            raise RequirementsError([("cost.price_catalog", f"cannot read {exc}")]) from None
        where = str(path)
    try:
        data = inputfile.parse_yaml(text, where)
        return PriceCatalog.model_validate(data)
    except inputfile.InputFileError as exc:
        raise RequirementsError([("cost.price_catalog", str(exc))]) from None
    except ValidationError as exc:
        raise RequirementsError([(f"{where}: {f}", w) for f, w in format_validation_error(exc)]) from None
