"""Issue 28, item 6: every command that reads a file, fed every kind of malformed file, exits 2 naming the file;
never a traceback, never a read of ``/dev/zero`` until memory runs out, never a hang on a FIFO.

The commands come from the typer app itself: every parameter typed ``Path`` (and every ``--trace``) is either in
:data:`READS` (fuzzed here) or in :data:`WRITES` (an output), so a new command that reads a file fails
:func:`test_every_file_parameter_is_classified` until it is added to the fuzz.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer.main
import typer.testing
from typer.testing import CliRunner

from gpucluster.cli.main import app
from gpucluster.inputfile import MAX_DOCUMENT_BYTES, MAX_NESTING
from tests.cli.samples import OPENB_NODES, OPENB_PODS, POD

pytestmark = pytest.mark.usefixtures("one_command_tree")

runner = CliRunner()



@dataclass(frozen=True)
class Reader:
    """One way a command reads a file: ``args(path, valid)`` builds its command line, ``valid`` holding valid
    files for the command's other required inputs."""

    command: str
    param: str
    args: Callable[[str, dict[str, str]], list[str]]
    suffix: str = ".yaml"
    label: str = ""
    needs: tuple[str, ...] = field(default=())

    @property
    def id(self) -> str:
        return f"{self.command}:{self.label or self.param}"


def _opt(command: str, flag: str, *rest: str, **valid_for: str) -> Callable[[str, dict[str, str]], list[str]]:
    def build(path: str, valid: dict[str, str]) -> list[str]:
        extra = [a for k, v in valid_for.items() for a in (v, valid[k])]
        return [*command.split(), *extra, *rest, flag, path]
    return build


def _trace(command: str, fmt: str, *rest: str, **valid_for: str) -> Callable[[str, dict[str, str]], list[str]]:
    def build(path: str, valid: dict[str, str]) -> list[str]:
        extra = [a for k, v in valid_for.items() for a in (v, valid[k])]
        return [command, *extra, *rest, "--trace", f"{fmt}:{path}"]
    return build


def _fgd_sweep(path: str, valid: dict[str, str]) -> list[str]:
    """``--trace-dir`` is a folder; the malformed file is its node list (a link to it)."""
    folder = Path(valid["tmp"]) / f"sweep-{abs(hash(path))}"
    folder.mkdir(exist_ok=True)
    (folder / "openb_pod_list_tiny.csv").write_text(OPENB_PODS)
    link = folder / "openb_node_list_gpu_node.csv"
    if not link.is_symlink():
        link.symlink_to(path)
    return ["experiment", "fgd-sweep", "--trace-dir", str(folder), "--workloads", "tiny", "--out",
            str(Path(valid["tmp"]) / "sweep-out")]


PODS_OPT = {"pods": "--pods"}
SERVER = ("--server", "http://127.0.0.1:9")
SYNTH = "synthetic:5:philly:0.001"
READS: list[Reader] = [
    Reader("schedule", "pods", _opt("schedule", "--pods")),
    Reader("schedule", "cluster", _opt("schedule", "--cluster", **PODS_OPT), needs=("pods",)),
    Reader("schedule", "cluster", _opt("schedule", "--cluster", **PODS_OPT), ".csv", "cluster-openb", ("pods",)),
    Reader("schedule", "device_config", _opt("schedule", "--device-config", **PODS_OPT), needs=("pods",)),
    Reader("demo", "cluster", _opt("demo", "--cluster")),
    Reader("design", "requirements", lambda p, v: ["design", p]),
    Reader("design", "prices", _opt("design", "--prices", "--preset", "dgx-h100-superpod")),
    Reader("whatif", "designs", _opt("whatif", "--design", "--trace", SYNTH)),
    *(Reader("whatif", "trace", _trace("whatif", fmt, design="--design"), suffix, f"trace-{fmt}", ("design",))
      for fmt, suffix in (("jobs", ".yaml"), ("tiresias", ".csv"))),
    *(Reader("simulate", "trace", _trace("simulate", fmt), suffix, f"trace-{fmt}")
      for fmt, suffix in (("jobs", ".yaml"), ("jobs", ".csv"), ("tiresias", ".csv"), ("alibaba-openb", ".csv"),
                          ("philly-gavel", ".trace"))),
    Reader("simulate", "cluster_path", _opt("simulate", "--cluster", "--trace", SYNTH)),
    Reader("simulate", "quota", _opt("simulate", "--quota", "--trace", SYNTH)),
    Reader("simulate", "device_config", _opt("simulate", "--device-config", "--trace", SYNTH)),
    Reader("agent", "cluster", _opt("agent", "--cluster", "--source", "sim", "--listen", "127.0.0.1:9", "--duration", "0.01")),
    Reader("agent", "pods", _opt("agent", "--pods", "--source", "sim", "--listen", "127.0.0.1:9", "--duration", "0.01")),
    Reader("up", "cluster", _opt("up", "--cluster", "--port", "9", data="--data-dir")),
    Reader("up", "kubeconfig", _opt("up", "--kubeconfig", "--port", "9", data="--data-dir")),
    Reader("up", "device_config", _opt("up", "--device-config", "--port", "9", data="--data-dir")),
    Reader("submit", "job_file", lambda p, v: ["submit", *SERVER, p]),
    Reader("spec validate", "file", lambda p, v: ["spec", "validate", p]),
    Reader("spec show", "file", lambda p, v: ["spec", "show", p]),
    Reader("spec show", "file", lambda p, v: ["spec", "show", "--raw", p], label="file-raw"),
    Reader("experiment fgd", "nodes", _opt("experiment fgd", "--nodes", openb_pods="--pods"), ".csv", needs=("openb_pods",)),
    Reader("experiment fgd", "pods", _opt("experiment fgd", "--pods", openb_nodes="--nodes"), ".csv", needs=("openb_nodes",)),
    Reader("experiment fgd-sweep", "trace_dir", _fgd_sweep, ".csv"),
    Reader("k8s extender", "kubeconfig", _opt("k8s extender", "--kubeconfig", "--listen", "127.0.0.1:9")),
    Reader("k8s extender", "device_config", _opt("k8s extender", "--device-config", "--listen", "127.0.0.1:9")),
    Reader("k8s scheduler", "kubeconfig", _opt("k8s scheduler", "--kubeconfig", "--listen", "127.0.0.1:9")),
    Reader("k8s scheduler", "device_config", _opt("k8s scheduler", "--device-config", "--listen", "127.0.0.1:9")),
    Reader("k8s register-nodes", "kubeconfig", _opt("k8s register-nodes", "--kubeconfig", "--once")),
    Reader("k8s register-nodes", "cluster", _opt("k8s register-nodes", "--cluster", "--once")),
    Reader("k8s manifests", "device_config", _opt("k8s manifests", "--device-config")),
    Reader("k8s manifests", "twins", _opt("k8s manifests", "--twins")),
    Reader("monitor fault", "pods", _opt("monitor fault", "--pods")),
    Reader("monitor fault", "cluster", _opt("monitor fault", "--cluster", **PODS_OPT), needs=("pods",)),
    Reader("analyze job", "metrics", _opt("analyze job", "--metrics", "j"), ".csv"),
    Reader("analyze job", "metrics", _opt("analyze job", "--metrics", "j"), ".json", "metrics-json"),
    Reader("analyze job", "pods", _opt("analyze job", "--pods", "j", "--source", "sim")),
    Reader("analyze job", "cluster", _opt("analyze job", "--cluster", "j", "--source", "sim", **PODS_OPT),
           needs=("pods",)),
]
"""Every (command, parameter) that reads a file, with the command line that reaches the read."""

WRITES = {
    ("design", "out"), ("design", "export_spec"), ("whatif", "out"), ("whatif", "plot_path"), ("simulate", "out"),
    ("up", "data_dir"), ("experiment fgd", "out"), ("experiment fgd-sweep", "out"), ("monitor rules", "out"),
    ("monitor dashboard", "out"), ("monitor fault", "audit_log"),
}
"""Parameters typed ``Path`` that name an output (a file or folder written), not an input."""


def _commands() -> Iterator[tuple[str, str]]:
    def walk(cmd: object, prefix: list[str]) -> Iterator[tuple[str, str]]:
        subs = getattr(cmd, "commands", None)
        if subs is not None:
            for name, sub in subs.items():
                yield from walk(sub, [*prefix, name])
            return
        for p in getattr(cmd, "params", []):
            annotation = str(p.type_descriptor.annotation)
            if "Path" in annotation or p.name == "trace":
                yield " ".join(prefix), p.name
    yield from walk(typer.main.get_command(app), [])


def test_every_file_parameter_is_classified() -> None:
    found = set(_commands())
    fuzzed = {(r.command, r.param) for r in READS}
    assert found - fuzzed - WRITES == set(), "a new file parameter: add it to READS (or WRITES for an output)"
    assert (fuzzed | WRITES) - found == set(), "READS/WRITES name a parameter the app no longer has"


# ------------------------------------------------------------------------------------------------ the corpus
def _deep_yaml(p: Path) -> Path:
    p.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    return p


def _deep_mapping(p: Path) -> Path:
    p.write_text("".join("  " * i + f"k{i}:\n" for i in range(MAX_NESTING + 20)) + "  " * (MAX_NESTING + 20) + "v\n")
    return p


def _deep_json(p: Path) -> Path:
    p = p.with_suffix(".json")
    p.write_text("[" * 200_000 + "]" * 200_000)
    return p


def _binary(p: Path) -> Path:
    p.write_bytes(bytes(range(256)) * 16)
    return p


def _latin1(p: Path) -> Path:
    p.write_bytes("name: café\nkind: Pod\n".encode("latin-1"))
    return p


def _empty(p: Path) -> Path:
    p.write_text("")
    return p


def _directory(p: Path) -> Path:
    p.mkdir()
    return p


def _missing(p: Path) -> Path:
    return p


def _fifo(p: Path) -> Path:
    os.mkfifo(p)
    return p


def _dev_zero(p: Path) -> Path:
    return Path("/dev/zero")


def _fifty_mb(p: Path) -> Path:
    with p.open("wb") as fh:  # sparse: costs no disk
        fh.truncate(50 * 10**6)
    assert p.stat().st_size > MAX_DOCUMENT_BYTES
    return p


def _fifty_mb_text(p: Path) -> Path:
    """Text, so that only the size can refuse it before it is parsed (sparse, then a text head)."""
    with p.open("wb") as fh:
        fh.write(b"a: 1\n" * 1000)
        fh.truncate(50 * 10**6)
    return p


def _wrong_types(p: Path) -> Path:
    p.write_text("- 1\n- [2, 3]\n- {x: y}\n")
    return p


def _huge_numbers(p: Path) -> Path:
    p.write_text(f"a: {'9' * 5000}\nb: 1e999999\nc: -{'9' * 300}\n")
    return p


def _huge_csv_numbers(p: Path) -> Path:
    big = "9" * 5000
    p.write_text(f"a,b,c\n{big},1e999999,-{big}\n")
    return p


def _alias_bomb(p: Path) -> Path:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    p.write_text("\n".join(lines) + "\n")
    return p


def _self_alias(p: Path) -> Path:
    p.write_text("kind: &k [*k]\n")
    return p


def _json_huge_int(p: Path) -> Path:
    p = p.with_suffix(".json")
    p.write_text('{"samples": [' + "9" * 5000 + "]}")
    return p


CORPUS: dict[str, Callable[[Path], Path]] = {
    "deep-yaml": _deep_yaml, "deep-mapping": _deep_mapping, "deep-json": _deep_json, "binary": _binary,
    "latin1": _latin1, "empty": _empty, "directory": _directory, "missing": _missing, "fifo": _fifo,
    "dev-zero": _dev_zero, "50MB": _fifty_mb, "50MB-text": _fifty_mb_text, "wrong-types": _wrong_types,
    "huge-numbers": _huge_numbers, "huge-csv-numbers": _huge_csv_numbers, "alias-bomb": _alias_bomb,
    "self-alias": _self_alias, "json-huge-int": _json_huge_int,
}


@pytest.fixture
def valid(tmp_path: Path) -> dict[str, str]:
    files = {"pods": ("pods.yaml", POD), "design": ("design.yaml", "name: d\ngpu: H100\nservers: 2\n"),
             "openb_nodes": ("nodes.csv", OPENB_NODES), "openb_pods": ("openb_pod_list_tiny.csv", OPENB_PODS)}
    out = {"tmp": str(tmp_path), "data": str(tmp_path / "data")}
    for key, (name, text) in files.items():
        (tmp_path / name).write_text(text)
        out[key] = str(tmp_path / name)
    return out


@pytest.mark.parametrize("case", sorted(CORPUS))
@pytest.mark.parametrize("reader", READS, ids=[r.id for r in READS])
def test_a_malformed_file_exits_2_naming_it(tmp_path: Path, valid: dict[str, str], reader: Reader,
                                             case: str) -> None:
    target = CORPUS[case]((tmp_path / "input").with_suffix(reader.suffix))
    args = reader.args(str(target), valid)
    res = runner.invoke(app, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), (args, repr(res.exception))
    output = res.output.replace("\n", "")
    assert res.exit_code == 2, (args, res.output)
    assert "Traceback" not in output, (args, res.output)
    shown = str(target) if reader.param != "trace_dir" else str(Path(args[args.index("--trace-dir") + 1]))
    assert shown in output, (args, res.output)


@pytest.mark.parametrize("case", sorted(set(CORPUS) - {"missing", "empty"}))  # no contexts, by design
def test_a_malformed_config_file_exits_2_naming_it(tmp_path: Path, case: str) -> None:
    """The contexts file every client command reads (``$GPUCLUSTER_CONFIG``), not a parameter."""
    from gpucluster.cli.client import CONFIG_ENV

    target = CORPUS[case](tmp_path / "config.yaml")
    res = runner.invoke(app, ["config", "get-contexts"], env={CONFIG_ENV: str(target)})
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 2, res.output
    assert str(target) in res.output.replace("\n", ""), res.output
