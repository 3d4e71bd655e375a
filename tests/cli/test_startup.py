"""The console script starts lazily (issue 32, minor): ``--help``, ``--version``, ``version`` and completing a
command name import no command module (no numpy, no scheduler, no spec loader); a named command imports its own
module only; the quick ``--help`` says what the whole app's says. Start-up time is measured by
``bench/cli_startup.py`` (figures in ``docs/benchmarks.md``), never asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from gpucluster.cli import main as cli_main

runner = CliRunner()
HEAVY = ("numpy", "gpucluster.spec", "gpucluster.scheduler", "gpucluster.cli.common", "httpx", "pydantic",
         "fastapi", "starlette", "uvicorn", "kubernetes", "matplotlib", "scipy", "yaml")

# Runs the console script's main() in a fresh interpreter and prints, after it exits, which modules it imported.
PROBE = """
import json, sys
sys.argv = ["gpucluster", *json.loads(sys.argv[1])]
from gpucluster.cli.main import main
try:
    main()
except SystemExit:
    pass
print("\\nIMPORTED " + json.dumps(sorted(sys.modules)))
"""


def probe(args: list[str], **env: str) -> tuple[str, set[str]]:
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "80", **env}, timeout=120, check=False)
    out, _, imported = proc.stdout.rpartition("\nIMPORTED ")
    assert imported, proc.stderr
    return out + proc.stderr, set(json.loads(imported))


def heavy(imported: set[str]) -> list[str]:
    return sorted(m for m in imported if m.split(".")[0] in HEAVY or m.startswith(HEAVY))


@pytest.mark.parametrize("args", [["--help"], [], ["--version"], ["version"]])
def test_help_and_version_import_no_command_module(args: list[str]) -> None:
    out, imported = probe(args)
    assert heavy(imported) == [], f"gpucluster {' '.join(args)} imported {heavy(imported)}"
    assert not [m for m in imported if m.startswith("gpucluster.cli.") and m.endswith("_cmd")]
    if "version" in " ".join(args):
        assert out.strip() == "0.1.0"
    else:
        assert "Usage: gpucluster" in out and "describe" in out and "tenants" in out


def test_completing_a_command_name_imports_nothing_heavy_and_an_option_imports_its_module() -> None:
    out, imported = probe([], _GPUCLUSTER_COMPLETE="complete_bash", COMP_WORDS="gpucluster ten", COMP_CWORD="1")
    assert out.split() == ["tenants"], out
    assert heavy(imported) == []
    out, imported = probe([], _GPUCLUSTER_COMPLETE="complete_bash", COMP_WORDS="gpucluster get --outp",
                          COMP_CWORD="2")
    assert "--output" in out.split()
    assert "gpucluster.cli.get_cmd" in imported
    assert "gpucluster.cli.simulate_cmd" not in imported
    # a client command loads no numpy and no spec loader (cli.common imports them only where a command uses them)
    assert not [m for m in imported if m.split(".")[0] == "numpy" or m.startswith(("gpucluster.spec",
                                                                                    "gpucluster.devices"))]


def test_a_command_imports_its_own_module_only() -> None:
    out, imported = probe(["spec", "--help"])
    assert "validate" in out
    assert "gpucluster.cli.spec_cmd" in imported
    assert not {"gpucluster.cli.simulate_cmd", "gpucluster.cli.k8s_cmd", "gpucluster.cli.whatif_cmd"} & imported


def test_an_unknown_command_is_answered_by_the_whole_app() -> None:
    assert cli_main.command_modules(["no-such-verb"]) is None
    assert cli_main.command_modules(["--help"]) == ()
    assert cli_main.command_modules(["get", "jobs"]) == ("get_cmd",)
    proc = subprocess.run([sys.executable, "-m", "gpucluster.cli.main", "no-such-verb"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "No such command" in proc.stderr


def test_the_command_table_is_the_apps() -> None:
    """Every command the modules register is in COMMANDS, in the same order, with its module and its help's first
    paragraph: the quick --help lists what the whole app runs."""
    group = typer.main.get_command(cli_main.app)
    assert isinstance(group, typer.core.TyperGroup)
    seen = {}
    for name in group.list_commands(None):  # type: ignore[arg-type]
        cmd = group.get_command(None, name)  # type: ignore[arg-type]
        assert cmd is not None
        callback = getattr(cmd, "callback", None)
        module = callback.__module__.rsplit(".", 1)[-1] if callback is not None else None
        seen[name] = (module, (cmd.help or "").split("\n\n")[0])
    table = {name: (None if isinstance(group.get_command(None, name), typer.core.TyperGroup)  # type: ignore[arg-type]
                    else module, text) for name, (module, text) in cli_main.COMMANDS.items()}
    hint = "a command was added, renamed or moved: update gpucluster.cli.main.COMMANDS to match"
    assert list(table) == list(seen), hint
    assert table == seen, hint


@pytest.mark.parametrize("columns", ["80", "200"])
def test_the_quick_help_is_the_whole_apps(columns: str) -> None:
    quick = runner.invoke(cli_main.quick_app(), ["--help"], prog_name="gpucluster", env={"COLUMNS": columns})
    full = runner.invoke(cli_main.app, ["--help"], prog_name="gpucluster", env={"COLUMNS": columns})
    assert quick.exit_code == full.exit_code == 0
    assert quick.stdout == full.stdout


# What Tab completion of a client command's arguments and options must not load (issue 32: completion under 0.3 s):
# typer's pydantic coercion, httpx (which loads rich's console), YAML, rich, numpy and the server side.
COMPLETION_HEAVY = ("numpy", "pydantic", "pydantic_core", "httpx", "yaml", "rich", "fastapi", "starlette", "uvicorn",
                    "kubernetes", "matplotlib", "scipy", "gpucluster.spec", "gpucluster.scheduler",
                    "gpucluster.devices", "gpucluster.service", "gpucluster.monitoring")


@pytest.mark.parametrize(("line", "expected"), [
    ("gpucluster get no", "nodes"),                 # an argument with its own completion
    ("gpucluster get nodes -o ", "json"),           # an option's value, after a typed argument
    ("gpucluster get --outp", "--output"),          # an option's name
    ("gpucluster describe ", "job"),
    ("gpucluster top ", "nodes"),
    ("gpucluster cancel --", "--server"),
    ("gpucluster tenants ", "list"),
    ("gpucluster config ", "set-context"),
    ("gpucluster cordon --", "--token"),
])
def test_completing_a_client_commands_arguments_imports_nothing_heavy(line: str, expected: str) -> None:
    """Fails on 739abbf, where completing ``get no`` imported httpx (and with it rich), YAML and, through typer's
    coercion of the unset options, pydantic: 0.58 s of CPU."""
    words = line.split()
    cword = str(len(words) if line.endswith(" ") else len(words) - 1)
    out, imported = probe([], _GPUCLUSTER_COMPLETE="complete_bash", COMP_WORDS=line, COMP_CWORD=cword)
    assert expected in out.split(), out
    loaded = sorted(m for m in imported if m.split(".")[0] in COMPLETION_HEAVY or m.startswith(COMPLETION_HEAVY))
    assert loaded == [], f"completing {line!r} imported {loaded[:12]}"


def test_deferred_coercion_still_converts_and_refuses() -> None:
    """``main()`` builds a parameter's coercion when it first has a value: a bad choice and an out-of-range number
    are still refused (exit 2, naming the option)."""
    for args, message in ((["get", "nodes", "-o", "bogus"], "'bogus' is not one of"),
                          (["get", "nodes", "--interval", "0.1"], "greater than or equal to 0.2")):
        proc = subprocess.run([sys.executable, "-m", "gpucluster.cli.main", *args, "--server", "http://127.0.0.1:9",
                               "--token", "t"], capture_output=True, text=True, timeout=120, check=False,
                              env={**os.environ, "COLUMNS": "200"})
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and ("--output" in proc.stderr or "--interval" in proc.stderr)


# ------------------------------------------------------------------ completing any command's options (issue 32)
# What building a command's parameters must not import, whichever command it is: completing `gpucluster simulate
# --<TAB>` used to import the whole engine (numpy, pydantic, the simulator: about 1 s of CPU per Tab).
ENGINE = ("numpy", "pandas", "pydantic", "pydantic_core", "fastapi", "starlette", "uvicorn", "scipy", "matplotlib",
          "kubernetes", "prometheus_client", "highspy", "httpx", "yaml", "rich", "gpucluster.model",
          "gpucluster.spec", "gpucluster.devices", "gpucluster.scheduler", "gpucluster.jobs", "gpucluster.simulator",
          "gpucluster.design", "gpucluster.whatif", "gpucluster.monitoring", "gpucluster.service",
          "gpucluster.kubernetes", "gpucluster.embedded", "gpucluster.inputfile")


def _commands() -> list[tuple[list[str], Any]]:
    """Every command and command group of the whole app (``[]`` is the root), with its click command: a command
    added later is covered without touching this test."""
    found: list[tuple[list[str], Any]] = []
    todo: list[tuple[list[str], Any]] = [([], typer.main.get_command(cli_main.app))]
    while todo:
        path, cmd = todo.pop(0)
        found.append((path, cmd))
        todo += [([*path, name], sub) for name, sub in getattr(cmd, "commands", {}).items()]
    return found


COMMAND_PATHS = _commands()


def _complete(path: list[str], *words: str) -> tuple[list[str], list[str]]:
    """Tab completion (bash) of ``gpucluster PATH WORDS``, the last word being completed: (the candidates it
    printed, the engine modules the process imported)."""
    line = " ".join(["gpucluster", *path, *(w or "''" for w in words)])
    out, imported = probe([], _GPUCLUSTER_COMPLETE="complete_bash", COMP_WORDS=line,
                          COMP_CWORD=str(len(path) + len(words)))
    return out.split(), sorted(m for m in imported if m.split(".")[0] in ENGINE or m.startswith(ENGINE))


def _options(cmd: Any) -> list[Any]:
    """The options a person sees (``--help`` included); typer carries its own click, hence no isinstance."""
    ctx = cmd.context_class(cmd, info_name=cmd.name)
    return [p for p in cmd.get_params(ctx) if p.param_type_name == "option" and not p.hidden]


def _option_names(cmd: Any) -> set[str]:
    return {o for p in _options(cmd) for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}


@pytest.mark.parametrize(("path", "cmd"), COMMAND_PATHS, ids=[" ".join(p) or "(root)" for p, _ in COMMAND_PATHS])
def test_completing_any_commands_options_imports_no_engine(path: list[str], cmd: Any) -> None:
    """``gpucluster CMD --<TAB>`` lists the command's options and imports none of numpy, pydantic, fastapi, scipy,
    matplotlib, kubernetes, YAML, rich or the engine's packages. Fails on 4aa0b73, where `schedule`, `demo`,
    `design`, `whatif`, `simulate`, `up`, `submit`, `agent`, `spec`, `experiment`, `k8s`, `monitor` and `analyze`
    imported them at their modules' top (0.3 to 1.1 s of CPU per Tab); timing is bench/cli_startup.py's."""
    shown, loaded = _complete(path, "--")
    assert set(shown) == _option_names(cmd), f"gpucluster {' '.join(path)} --<TAB> printed {shown}"
    assert loaded == [], f"completing gpucluster {' '.join(path)} --<TAB> imported {loaded[:12]}"


def _values(cmd: Any, option: Any) -> list[str]:
    """What completing the option's value offers, asked in this process (where everything is imported)."""
    return [str(item.value) for item in option.shell_complete(cmd.context_class(cmd, info_name=cmd.name), "")]


CHOICES = [(path, option.opts[0], _values(cmd, option))
           for path, cmd in COMMAND_PATHS for option in _options(cmd) if _values(cmd, option)]


@pytest.mark.parametrize(("path", "option", "values"), CHOICES,
                         ids=[" ".join([*p, o]) for p, o, _ in CHOICES])
def test_completing_an_options_value_imports_no_engine(path: list[str], option: str, values: list[str]) -> None:
    """``gpucluster CMD --OPTION <TAB>`` for every option with values to offer (``schedule --node-policy``,
    ``up --log-format``, ``get -o`` ...) lists them, and imports no engine either."""
    assert {" ".join([*p, o]) for p, o, _ in CHOICES} >= {"schedule --node-policy", "up --log-format"}
    shown, loaded = _complete(path, option, "")
    assert shown == values
    assert loaded == [], f"completing gpucluster {' '.join(path)} {option} <TAB> imported {loaded[:12]}"


def test_the_values_signatures_show_are_the_engines() -> None:
    """``cli/shown.py`` holds copies of the engine's values that commands' signatures show (so that building the
    parameters imports no engine): each copy is the engine's own."""
    from gpucluster import design, jobs, model, whatif
    from gpucluster.cli import shown

    assert shown.DEFAULT_QUEUE_POLICY == jobs.DEFAULT_QUEUE_POLICY
    assert shown.DESIGN_PRESETS == design.PRESETS
    assert shown.WHATIF_YEARS == whatif.DEFAULT_YEARS
    assert shown.WHATIF_JCT_TOLERANCE_PCT == whatif.DEFAULT_TOLERANCE_PCT
    assert [(p.name, p.value) for p in shown.Policy] == [(p.name, p.value) for p in model.Policy]
