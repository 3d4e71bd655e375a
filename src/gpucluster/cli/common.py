"""Helpers shared by CLI commands: JSON output, user errors with exit code 2, cluster loading."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from gpucluster.cli.output import write_json
from gpucluster.devices import (
    DeviceConfig,
    DeviceConfigError,
    DeviceSettings,
    VendorRegistry,
    load_device_config,
)
from gpucluster.spec import Cluster, SpecError, load_cluster

console = Console()
err_console = Console(stderr=True)

EXIT_USAGE = 2


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Report a user error (where and why) on stderr and exit non-zero."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def print_json(data: Any) -> None:
    """``--json``: written as is, whatever the terminal (``cli.output``)."""
    write_json(data)


def cluster_option_help() -> str:
    return "Cluster spec YAML or Kubernetes Node manifests (default: the built-in seed reference cluster)."


DeviceConfigOpt = Annotated[Path | None, typer.Option(
    "--device-config", help="HAMi's device-config.yaml (its chart's ConfigMap or the file in it): resource names, "
                            "defaultMemory/defaultCores/defaultGPUNum, memoryFactor, deviceSplitCount, "
                            "deviceMemoryScaling per vendor. Default: HAMi's defaults.")]


def device_config_or_fail(path: Path) -> DeviceConfig:
    """``--device-config``, loaded (unused settings are warned)."""
    try:
        config = load_device_config(path)
    except DeviceConfigError as exc:
        fail(f"--device-config: {exc}")
    for note in config.notes:
        err_console.print(f"[yellow]warning:[/] --device-config: {note}", highlight=False, soft_wrap=True)
    return config


def device_settings_or_fail(path: Path | None) -> DeviceSettings:
    """The device settings of ``--device-config`` (HAMi's defaults without one); unused settings are warned."""
    return DeviceSettings() if path is None else device_config_or_fail(path).settings


def registry_or_fail(path: Path | None) -> VendorRegistry:
    return VendorRegistry.from_settings(device_settings_or_fail(path))


def load_cluster_or_fail(path: Path | None, registry: VendorRegistry | None = None) -> Cluster:
    try:
        return load_cluster(path, registry)
    except SpecError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{path}: {exc.strerror}")
