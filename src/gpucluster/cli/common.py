"""Helpers shared by CLI commands: JSON output, user errors with exit code 2, cluster loading."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from gpucluster.cli.output import write_json

if TYPE_CHECKING:  # imported where used: a client command (get, cancel ...) never loads numpy or the spec loader
    from rich.console import Console

    from gpucluster.devices import DeviceConfig, DeviceSettings, VendorRegistry
    from gpucluster.spec import Cluster

    console: Console
    err_console: Console


def __getattr__(name: str) -> Any:
    """``console`` and ``err_console`` (rich consoles for stdout and stderr), made on first use: importing
    rich's console costs about 0.07 s of CPU, which Tab completion and ``--help`` of a command never need."""
    if name in ("console", "err_console"):
        from rich.console import Console

        return globals().setdefault(name, Console(stderr=name == "err_console"))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _stderr() -> Console:
    """``err_console`` for this module's own functions (a module's ``__getattr__`` does not serve its globals)."""
    made: Console = globals().get("err_console") or __getattr__("err_console")
    return made

EXIT_USAGE = 2


def plain(value: object) -> str:
    """``value`` as text for a rich markup string: a ``[word]`` in a path, job id, label, message or anything else
    from outside is printed as it is (rich would drop it, and ``[/word]`` would end in a markup error)."""
    from rich.markup import escape

    return escape(str(value))


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Report a user error (where and why) on stderr and exit non-zero. ``message`` is text, not rich markup: a
    path or value with ``[word]`` in it is printed as it is."""
    _stderr().print(f"[bold red]error:[/] {plain(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def check_out_dir(out: Path, flag: str = "--out") -> None:
    """Exit 2 now, before a long run, when ``out`` cannot become the output folder: it is not a folder, or the
    folder it would be made in is not one or cannot be written. Nothing is created."""
    if out.exists() and not out.is_dir():
        fail(f"{flag} {out}: not a folder")
    found = next((p for p in (out, *out.parents) if p.exists()), None)
    if found is not None and not found.is_dir():
        fail(f"{flag} {out}: {found} is not a folder")
    if found is not None and not os.access(found, os.W_OK | os.X_OK):
        fail(f"{flag} {out}: {found} cannot be written")


@contextlib.contextmanager
def staged_out(out: Path, flag: str = "--out") -> Iterator[Path]:
    """A fresh folder inside ``out`` (made if missing) for a command's output files; once the block has written
    them all they move into ``out`` (one ``os.replace`` each). A failure while writing (a full disk, a folder in
    the way of a file) exits 2 naming ``out`` and the file, and leaves ``out`` as it was: no half-written file, no
    mix of this run's files and an earlier run's."""
    check_out_dir(out, flag)
    try:
        out.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=".partial-", dir=out))
    except OSError as exc:
        fail(f"{flag} {out}: {exc.strerror or exc}")
    try:
        yield stage
        files = sorted(stage.iterdir())
        for f in files:
            if (out / f.name).is_dir():
                fail(f"{flag} {out}: could not write {f.name}: a folder of that name is in the way")
        for f in files:
            os.replace(f, out / f.name)
    except OSError as exc:
        name = Path(str(exc.filename)).name if exc.filename else "its files"
        fail(f"{flag} {out}: could not write {name}: {exc.strerror or exc}")
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def print_json(data: Any) -> None:
    """``--json``: written as is, whatever the terminal (``cli.output``)."""
    write_json(data)


def cluster_option_help() -> str:
    return ("Cluster spec YAML, Kubernetes Node manifests, or an Alibaba openb node list (.csv) (default: the "
            "built-in seed reference cluster).")


DeviceConfigOpt = Annotated[Path | None, typer.Option(
    "--device-config", help="HAMi's device-config.yaml (its chart's ConfigMap or the file in it): resource names, "
                            "defaultMemory/defaultCores/defaultGPUNum, memoryFactor, deviceSplitCount, "
                            "deviceMemoryScaling per vendor. Default: HAMi's defaults.")]


def device_config_or_fail(path: Path) -> DeviceConfig:
    """``--device-config``, loaded (unused settings are warned)."""
    from gpucluster.devices import DeviceConfigError, load_device_config

    try:
        config = load_device_config(path)
    except DeviceConfigError as exc:
        fail(f"--device-config: {exc}")
    for note in config.notes:
        _stderr().print(f"[yellow]warning:[/] --device-config: {plain(note)}", highlight=False, soft_wrap=True)
    return config


def device_settings_or_fail(path: Path | None) -> DeviceSettings:
    """The device settings of ``--device-config`` (HAMi's defaults without one); unused settings are warned."""
    from gpucluster.devices import DeviceSettings

    return DeviceSettings() if path is None else device_config_or_fail(path).settings


def registry_or_fail(path: Path | None) -> VendorRegistry:
    from gpucluster.devices import VendorRegistry

    return VendorRegistry.from_settings(device_settings_or_fail(path))


def load_cluster_or_fail(path: Path | None, registry: VendorRegistry | None = None) -> Cluster:
    from gpucluster.spec import SpecError, load_cluster

    if path is not None and path.suffix == ".csv":
        from gpucluster.simulator.traces import TraceError
        from gpucluster.simulator.traces.openb import openb_cluster

        try:
            return openb_cluster(path)
        except TraceError as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"{path}: {exc.strerror}")
    try:
        return load_cluster(path, registry)
    except SpecError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{path}: {exc.strerror}")


# ------------------------------------------------------------------------------------ renamed flags
def renamed(new_value: Any, old_value: Any, new: str, old: str) -> Any:
    """The value of a renamed flag: ``new``'s, or that of its deprecated alias ``old`` (kept with its old
    meaning for this command; using it warns on stderr). Both at once exit 2."""
    if old_value is None or old_value == []:
        return new_value
    if new_value is not None and new_value != []:
        fail(f"{old} is the deprecated name of {new} here; give {new} only")
    _stderr().print(f"[yellow]warning:[/] {plain(old)} is deprecated here: use {plain(new)} (the same meaning)",
                      highlight=False, soft_wrap=True)
    return old_value


def deprecated_option(old: str, new: str) -> Any:
    """A hidden ``typer.Option`` for the deprecated alias ``old`` of ``new`` (read with :func:`renamed`)."""
    return typer.Option(old, hidden=True, help=f"Deprecated: {new}.")


# ------------------------------------------------------------------------------------ policy options
# One name for each kind of policy in every command (``simulate``, ``whatif``, ``up``, ``k8s``):
# ``--placement-policy`` chooses where pods go (``gpucluster.scheduler.PROFILES``), ``--queue-policy`` in which
# order jobs are tried and who may be preempted (``gpucluster.jobs.POLICIES``). ``--policy`` stays a deprecated,
# hidden alias with the meaning it always had in each command (:func:`renamed` warns): the queue policy for
# ``simulate`` and ``whatif``, the placement policy for ``up``, ``k8s``, ``schedule``, ``demo``, ``monitor`` and
# ``experiment fgd``.
QUEUE_HELP = "Queue policy: fifo, sjf, tiresias, drf, offers or default (3-queue 2D-LAS, preemptive)"
PLACEMENT_HELP = ("Placement policy: default (speed-fgd: stranding-fgd, on mixed clusters restricted to the GPU "
                  "models within 10% of the job's best speed), stranding-fgd, gavel, binpack, spread, fgd, "
                  "bestfit, ... (jobs: the queue policy's own binpack with gang + topology)")


def training_share_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    """Table rows ``training on MODEL`` (percent per result column) from ``training_share_by_model``; none on a
    cluster of one GPU model."""
    models: list[str] = []
    for r in results:
        models += [m for m in r.get("training_share_by_model", {}) if m not in models]
    return [[f"training on {m}", *(f"{100 * r.get('training_share_by_model', {}).get(m, 0.0):.1f}%"
                                   for r in results)] for m in models]


def check_queue_policies(value: str, flag: str = "--queue-policy", allow_all: bool = False) -> list[str]:
    """``fifo`` or a comma list (``all`` when allowed) -> policy names; unknown ones exit 2 naming them."""
    from gpucluster.jobs import POLICIES

    if allow_all and value == "all":
        return sorted(POLICIES)
    names = [p.strip() for p in value.split(",") if p.strip()]
    if not names:
        fail(f"{flag}: give a queue policy ({', '.join(sorted(POLICIES))})")
    for name in names:
        if name not in POLICIES:
            fail(f"{flag}: unknown queue policy {name!r}; known: {', '.join(sorted(POLICIES))}"
                 + (", all" if allow_all else ""))
    return names


def check_placement_policy(value: str | None, flag: str = "--placement-policy") -> str | None:
    """A placement policy name (None stays None: the queue policy's own); unknown ones exit 2."""
    from gpucluster.jobs import placement_names

    if value is not None and value not in placement_names():
        fail(f"{flag}: unknown placement policy {value!r}; known: {', '.join(placement_names())}")
    return value
