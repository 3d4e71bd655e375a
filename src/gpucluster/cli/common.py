"""Helpers shared by CLI commands: JSON output, user errors with exit code 2, cluster loading."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console

from gpucluster.spec import Cluster, SpecError, load_cluster

console = Console()
err_console = Console(stderr=True)

EXIT_USAGE = 2


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Report a user error (where and why) on stderr and exit non-zero."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def cluster_option_help() -> str:
    return "Cluster spec YAML or Kubernetes Node manifests (default: the built-in seed reference cluster)."


def load_cluster_or_fail(path: Path | None) -> Cluster:
    try:
        return load_cluster(path)
    except SpecError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{path}: {exc.strerror}")
