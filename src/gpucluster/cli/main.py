"""The root ``gpucluster`` app; each command group registers itself here.

Start-up is lazy. ``main()`` (the console script) imports only the module of the command it runs: ``gpucluster
--help``, ``--version``, ``version`` and Tab completion of a command name import no command module at all (the
help lists the commands from :data:`COMMANDS`), so they start in a fraction of a second instead of importing numpy,
the scheduler and the spec loader, nor pydantic (:func:`_lazy_coercion`). ``app`` (what tests and ``python -m`` use)
is the whole app, built on first use.

Completing a command's options (``gpucluster simulate --<TAB>``) and its ``--help`` import that command's module,
whose parameters click must build; so every command module keeps the same rule: at its top it imports only typer,
the standard library and the CLI's light modules (``common``, ``output``, ``client``, ``get_cmd``, ``shown``), and
imports numpy, pydantic, rich, YAML, the engine and the server inside the function that needs them. A value a
signature shows from the engine (a default, a set of choices) is copied in ``shown`` (a test checks each copy).
``tests/cli/test_startup.py`` completes every command's options in a fresh interpreter and fails if it loaded any
of them.
"""

from __future__ import annotations

import importlib
import logging
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from gpucluster import __version__

ROOT_HELP = "GPU-cluster control plane: plan, schedule, watch and replay GPU clusters."

#: Modules that register commands, in registration order (the order ``--help`` lists their commands).
MODULES = (
    "spec_cmd", "schedule_cmd", "demo_cmd", "design_cmd", "whatif_cmd", "experiment_cmd", "simulate_cmd", "k8s_cmd",
    "deploy_cmd", "monitor_cmd", "service_cmd", "get_cmd", "node_cmd", "top_cmd", "tenants_cmd", "config_cmd",
)

#: Every top-level command in ``--help`` order: name -> (module that registers it, first paragraph of its help).
#: ``tests/cli/test_startup.py`` checks it against the app the modules build; a command missing here still runs
#: (``main()`` then builds the whole app), it is only missing from the quick ``--help``.
COMMANDS: dict[str, tuple[str, str]] = {
    "schedule": ("schedule_cmd", "Schedule pods one by one (file order) and print where each landed, or why it "
                                 "could not."),
    "demo": ("demo_cmd", "Place a synthetic GPU-sharing workload on the cluster with each policy; print a summary "
                         "table."),
    "design": ("design_cmd", "Turn requirements into a checked cluster design (compute, network, storage, power, "
                             "cost)."),
    "whatif": ("whatif_cmd", "Simulate each design on the same workload; print cost against utilisation and JCT, "
                             "and which to buy."),
    "simulate": ("simulate_cmd", "Replay a job trace: queueing, gang + topology placement, preemption; print JCT, "
                                 "utilisation, fairness."),
    "agent": ("monitor_cmd", "Serve device metrics (dcgm-exporter's names, HAMi's host names) and allocation "
                             "metrics (ours and\nHAMi's scheduler names) for Prometheus."),
    "up": ("service_cmd", "Run the control plane: REST API (OpenAPI at /docs) and the dashboard."),
    "submit": ("service_cmd", "Submit a job to a running control plane."),
    "logs": ("service_cmd", "Print a job's container log (one replica's pod, through the Kubernetes API server)."),
    "jobs": ("service_cmd", "List jobs (newest first) on a running control plane (`gpucluster get jobs` does "
                            "more)."),
    "nodes": ("service_cmd", "List nodes with their GPU allocation on a running control plane (`gpucluster get "
                             "nodes` does more)."),
    "get": ("get_cmd", "List jobs, nodes, tenants, alerts, remediations, the queue or silences (kubectl get)."),
    "describe": ("get_cmd", "Everything about one job or node (kubectl describe)."),
    "cancel": ("get_cmd", "Cancel pending or running jobs (exit 2 for one that already finished)."),
    "events": ("get_cmd", "What happened, oldest first (kubectl events)."),
    "sinfo": ("get_cmd", "Slurm-like summary of nodes by pool, GPU model and state."),
    "cordon": ("node_cmd", "Mark a node unschedulable: no new pods; its running jobs stay (admin). Exit 2 if "
                           "already cordoned."),
    "uncordon": ("node_cmd", "Put a cordoned or drained node back in service (admin). Exit 2 if it is not "
                             "cordoned."),
    "drain": ("node_cmd", "Cordon a node and send every job on it back to the queue (admin)."),
    "top": ("top_cmd", "Utilisation beside allocation per node or per running job, allocated-but-idle first "
                       "(kubectl top)."),
    "version": ("main", "Print the version."),
    "spec": ("spec_cmd", "Cluster specs: validate a file, or show what it describes."),
    "experiment": ("experiment_cmd", "Placement experiments (FGD reproduction and policy comparisons)."),
    "k8s": ("k8s_cmd", "Run gpucluster's scheduler on a real Kubernetes cluster."),
    "deploy": ("deploy_cmd", "Deploy onto a GPU kind cluster (nvkind-like)."),
    "monitor": ("monitor_cmd", "Monitoring: alert rules, fault drills."),
    "analyze": ("monitor_cmd", "Analyse workloads from their metrics."),
    "remediation": ("node_cmd", "Planned remediation (actions `up` plans but does not carry out on its own): "
                                "approve or dismiss one."),
    "tenants": ("tenants_cmd", "Tenants: list them (with quota use), create one (its token), set a quota."),
    "config": ("config_cmd", "Contexts (a server and its token) for the client commands."),
}


def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


def root(version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True, help="Print the version and exit.")] = False) -> None:
    """GPU-cluster control plane: plan, schedule, watch and replay GPU clusters."""


def version() -> None:
    """Print the version."""
    typer.echo(__version__)


def build_app(modules: Sequence[str] = MODULES) -> typer.Typer:
    """The root app with the commands of ``modules`` (names under ``gpucluster.cli``) registered."""
    built = typer.Typer(name="gpucluster", help=ROOT_HELP, no_args_is_help=True, add_completion=True,
                        pretty_exceptions_enable=False)
    for name in modules:
        importlib.import_module(f"gpucluster.cli.{name}").register(built)
    built.callback()(root)
    built.command("version")(version)
    return built


def _stub() -> None:
    """A command the quick root lists but never runs (``main()`` runs a named command through its own module)."""


def quick_app() -> typer.Typer:
    """The root app listing every command from :data:`COMMANDS` (for ``--help`` and completing a command name)
    with only ``version`` runnable: no command module is imported."""
    quick = typer.Typer(name="gpucluster", help=ROOT_HELP, no_args_is_help=True, add_completion=True,
                        pretty_exceptions_enable=False)
    quick.callback()(root)
    for name, (module, text) in COMMANDS.items():
        quick.command(name, help=text)(version if module == "main" else _stub)
    return quick


def _lazy_coercion(command: Any, completing: bool = False) -> Any:
    """``command`` (a click command built by typer, and its subcommands) with each parameter's coercion built on
    first use. typer 0.29 builds a pydantic ``TypeAdapter`` for every parameter it processes, even one whose value
    is None (an unset ``--help``, ``--install-completion`` or ``-o``), which imports pydantic: about 0.2 s of CPU,
    as much as the rest of ``gpucluster version``. A value of None (or a bool flag's bool) needs no adapter: here
    the adapter is built the first time a parameter has a value to convert, and it converts as before.

    ``completing``: a Tab-completion request, where click parses the words typed so far only to find the command
    and the parameter being completed (it ignores conversion errors there, and none of our completion callbacks
    reads another parameter's value): values are kept as typed, so completing ``get nodes -o <TAB>`` imports no
    pydantic either. With a typer that has no such hook the command is returned as it is (slower, same
    behaviour)."""
    try:
        from typer._coercion import RuntimeParam, build_runtime_param
    except ImportError:  # another typer: nothing to defer
        return command

    @dataclass(frozen=True)
    class Deferred(RuntimeParam):
        descriptor: Any
        built: list[Any]

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if completing:
                return value
            if not self.built:
                self.built.append(build_runtime_param(self.descriptor))
            return self.built[0]._coerce_value(value, param=param, ctx=ctx)

    def defer(param: Any) -> Any:
        desc = getattr(param, "type_descriptor", None)
        if desc is not None and getattr(param, "_runtime_param", 0) is None:
            param._runtime_param = Deferred(parameter_info=desc.parameter_info, annotation=desc.annotation,
                                            descriptor=desc, built=[])
        return param

    todo = [command]
    while todo:
        cmd = todo.pop()
        todo.extend(getattr(cmd, "commands", {}).values())
        for param in cmd.params:
            defer(param)
        made = cmd.get_help_option  # click makes the --help option on first use
        setattr(cmd, "get_help_option", lambda ctx, made=made: defer(made(ctx)))  # noqa: B010 (a method)
    return command


def _words() -> list[str]:
    """The words after the program name: the command line, or the complete words of a completion request."""
    if "_GPUCLUSTER_COMPLETE" not in os.environ:
        return sys.argv[1:]
    if "COMP_WORDS" in os.environ:  # bash: the words of the line and the index of the one being completed
        words = shlex.split(os.environ["COMP_WORDS"])
        return words[1:int(os.environ.get("COMP_CWORD", len(words)))]
    line = os.environ.get("_TYPER_COMPLETE_ARGS", "")  # zsh, fish, powershell: the line so far
    words = shlex.split(line)
    return words[1:] if line.endswith(" ") else words[1:-1]


def command_modules(words: Sequence[str]) -> tuple[str, ...] | None:
    """The modules ``main()`` imports for a command line (``()``: none, the quick root); ``None``: all of them."""
    name = next((w for w in words if not w.startswith("-")), None)
    if name is None or name == "version":
        return ()
    if name not in COMMANDS:
        return None  # an unknown name: the whole app answers (it knows every command, or says there is none)
    return (COMMANDS[name][0],)


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("GPUCLUSTER_LOG", "WARNING").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    modules = command_modules(_words())
    built = quick_app() if modules == () else build_app(MODULES if modules is None else modules)
    _lazy_coercion(typer.main.get_command(built), completing="_GPUCLUSTER_COMPLETE" in os.environ)()


def __getattr__(name: str) -> Any:
    """``app``: the whole app, built (every command module imported) the first time it is asked for."""
    if name == "app":
        built = build_app()
        globals()["app"] = built
        return built
    raise AttributeError(name)


if __name__ == "__main__":
    main()
