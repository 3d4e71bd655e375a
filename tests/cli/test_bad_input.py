"""Issue 14, defect 9: bad files exit 2 with where and why, never a traceback (nor a run that never ends)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucluster.cli.main import app

runner = CliRunner()

POD = """
kind: Pod
metadata: {{name: p}}
spec:
  containers:
  - name: c
    resources: {{limits: {limits}}}
"""

SPEC = """
apiVersion: gpucluster.io/v1alpha1
kind: ClusterSpec
nodePools:
- name: big
  count: {count}
  cpuMilli: 64000
  memoryMiB: 262144
  gpu: {{model: H100, count: 8, memoryMiB: 81559}}
"""


def _refused(args: list[str], *expected: str) -> None:
    res = runner.invoke(app, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code == 2, res.output
    for text in expected:
        assert text in res.output, res.output


def test_spec_validate_on_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    f = tmp_path / "latin1.yaml"
    f.write_bytes("name: caf\xe9\n".encode("latin-1"))
    _refused(["spec", "validate", str(f)], "latin1.yaml", "not UTF-8")


@pytest.mark.parametrize(("limits", "why"), [
    ('{nvidia.com/gpu: "1e309"}', "out of range"),
    ("{nvidia.com/gpu: 1e22}", "at most 128"),
    ('{nvidia.com/gpu: 1, cpu: "1e999999"}', "out of range"),
    ('{nvidia.com/gpu: .nan}', "finite"),
])
def test_schedule_with_out_of_range_quantities(tmp_path: Path, limits: str, why: str) -> None:
    f = tmp_path / "pods.yaml"
    f.write_text(POD.format(limits=limits))
    _refused(["schedule", "--pods", str(f)], "pods.yaml", why)


def test_jobs_csv_with_a_nan_duration(tmp_path: Path) -> None:
    f = tmp_path / "jobs.csv"
    f.write_text("id,submit_s,gpus,duration_s\na,0,8,nan\n")
    _refused(["simulate", "--trace", f"jobs:{f}"], "jobs.csv:2: duration_s: must be a finite number")
    f.write_text("id,submit_s,gpus,duration_s\na,0,8,inf\n")
    _refused(["simulate", "--trace", f"jobs:{f}"], "jobs.csv:2: duration_s: must be a finite number")
    f.write_bytes(b"id,submit_s,gpus,duration_s\na,0,8,1\xff\n")
    _refused(["simulate", "--trace", f"jobs:{f}"], "not UTF-8")


def test_cluster_spec_with_a_hundred_million_nodes_is_refused_at_once(tmp_path: Path) -> None:
    f = tmp_path / "huge.yaml"
    f.write_text(SPEC.format(count=100_000_000))
    _refused(["spec", "validate", str(f)], "nodePools[0].count: must be <= 50000")
    second = SPEC.format(count=30_000).split("nodePools:\n")[1].replace("name: big", "name: more")
    f.write_text(SPEC.format(count=30_000) + second)
    _refused(["spec", "validate", str(f)], "at most 50,000")


OPENB_HEAD = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"


@pytest.mark.parametrize(("name", "text", "expected"), [
    # two jobs with one id reached the engine, whose ValueError ("job 'a' submitted twice") was a traceback
    ("jobs.csv", "id,submit_s,gpus,duration_s\na,0,8,100\nb,1,8,100\na,5,8,100\n",
     "jobs.csv:4: id: 'a' is already the id of the job at "),
    ("jobs.yaml", "- {id: a, submit_s: 0, gpus: 8, duration_s: 100}\n- {id: a, submit_s: 5, gpus: 1, duration_s: 9}\n",
     "jobs.yaml:2: id: 'a' is already the id of the job at "),
    ("pods.csv", OPENB_HEAD + "p,1000,1024,1,1000,0,100\np,1000,1024,1,500,10,200\n",
     "pods.csv:3: name: 'p' is already the name of the pod at "),
    # a row longer than the header said "unknown field None"
    ("long.csv", "id,submit_s,gpus,duration_s\na,0,8,100,7,x\n", "long.csv:2: 6 fields, but the header (line 1) names 4"),
    # a field longer than the csv module reads, in the middle: on main before these cases no line was named
    ("big.csv", f"id,submit_s,gpus,duration_s\na,0,8,100\nb,0,8,{'1' * 200_000}\nc,0,8,100\n",
     "big.csv:3: not a readable CSV file: field larger than field limit"),
    ("pods.csv", OPENB_HEAD + f"p,1000,1024,1,1000,0,100\nq,1000,1024,1,1000,0,{'1' * 200_000}\n",
     "pods.csv:3: not a readable CSV file: field larger than field limit"),
], ids=["jobs-csv-same-id", "jobs-yaml-same-id", "openb-same-name", "row-longer-than-header", "jobs-csv-huge-field",
        "openb-huge-field"])
@pytest.mark.parametrize("command", ["simulate", "whatif"])
def test_a_trace_line_the_loader_cannot_take_names_its_line(tmp_path: Path, command: str, name: str, text: str,
                                                            expected: str) -> None:
    f = tmp_path / name
    f.write_text(text)
    trace = f"{'alibaba-openb' if name == 'pods.csv' else 'jobs'}:{f}"
    design = tmp_path / "design.yaml"
    design.write_text("name: d\ngpu: H100\nservers: 2\n")
    args = ["simulate", "--trace", trace] if command == "simulate" else ["whatif", "--design", str(design),
                                                                         "--trace", trace]
    res = runner.invoke(app, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code == 2, res.output
    assert expected in " ".join(res.output.split()), res.output
    assert "Traceback" not in res.output and res.stdout == ""


def test_a_philly_folder_with_one_vc_twice_names_both_files(tmp_path: Path) -> None:
    """Gavel ships one folder per seed, each with the same VC files; given their parent, two files made jobs of
    one id (VC-LINE) and the engine's ValueError a traceback."""
    (tmp_path / "oracle_throughputs.json").write_text('{"v100": {"ResNet-18": {"null": 10.0}}}')
    for seed in ("seed=0", "seed=1"):
        (tmp_path / seed).mkdir()
        (tmp_path / seed / "vc1.trace").write_text("ResNet-18\tpython train.py\t-n\t0\t1000\t5\t1\n")
    _refused(["simulate", "--trace", f"philly-gavel:{tmp_path}"],
             f"{tmp_path / 'seed=0' / 'vc1.trace'} and {tmp_path / 'seed=1' / 'vc1.trace'} are both VC 'vc1'")
    res = runner.invoke(app, ["simulate", "--trace", f"philly-gavel:{tmp_path / 'seed=0'}", "--json"])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("folder", ["runs[old]", "runs[/old]", "a[bold]b"])
def test_an_error_names_a_path_with_brackets_as_it_is(tmp_path: Path, folder: str) -> None:
    """An error message is printed as text, not as rich markup: a path (or any value) with ``[word]`` in it keeps
    its brackets, and ``[/word]`` does not end in a markup error."""
    d = tmp_path / folder
    d.mkdir(parents=True)
    f = d / "jobs.csv"
    f.write_text("id,submit_s,gpus,duration_s\na,0,8,nan\n")
    _refused(["simulate", "--trace", f"jobs:{f}"], f"{folder}/jobs.csv:2: duration_s: must be a finite number")


def test_a_trace_with_bracketed_job_ids_and_an_out_folder_with_brackets_prints_them_as_they_are(
        tmp_path: Path) -> None:
    """Job ids from a CSV trace and the --out folder are text, not rich markup: ``[/x]`` is no markup error and
    ``a[bold]b`` keeps its brackets (on main ``wrote runs[/x]/`` ended in a traceback)."""
    f = tmp_path / "jobs.csv"
    f.write_text("id,submit_s,gpus,duration_s\n[/x],0,1,60\na[bold]b,5,2,60\nrun[old],9,1,30\n")
    out = tmp_path / "runs[/x]" / "a[bold]b"
    res = runner.invoke(app, ["simulate", "--trace", f"jobs:{f}", "--out", str(out)])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code == 0, res.output
    assert "3 jobs on" in res.stdout and "Traceback" not in res.output
    assert f"wrote{out}/" in "".join(res.stdout.split()), res.stdout  # rich may wrap a long path
    res = runner.invoke(app, ["simulate", "--trace", f"jobs:{f}", "--json"])
    assert res.exit_code == 0 and res.stdout.lstrip().startswith("{"), res.output


@pytest.mark.parametrize("folder", ["specs[/old]", "a[bold]b"])
def test_spec_validate_names_a_path_with_brackets_as_it_is(tmp_path: Path, folder: str) -> None:
    d = tmp_path / folder
    d.mkdir(parents=True)
    f = d / "c.yaml"
    f.write_text(SPEC.format(count=2))
    res = runner.invoke(app, ["spec", "validate", str(f)])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code == 0, res.output
    assert f"valid:{f}:2nodes,16devices" in "".join(res.stdout.split()), res.stdout  # rich may wrap a long path


def test_an_output_folder_that_cannot_take_the_files_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """``--out`` of simulate, whatif and design: a file where the folder should be is refused (simulate and whatif
    before the run), and a folder in the way of one output file exits 2 naming it with none of the other files
    written. On main before this test ``design --out FILE`` and a folder in the way were tracebacks, and simulate
    had written the files before the one it could not."""
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("id,submit_s,gpus,duration_s\na,0,1,100\nb,5,1,10\n")
    design = tmp_path / "design.yaml"
    design.write_text("name: d\ngpu: H100\nservers: 2\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("keep\n")
    for args in (["simulate", "--trace", f"jobs:{jobs}"], ["whatif", "--design", str(design), "--trace", f"jobs:{jobs}"],
                 ["design", "--servers", "2", "--gpu", "H100"]):
        _refused([*args, "--out", str(a_file)], f"--out {a_file}: not a folder")
        _refused([*args, "--out", str(a_file / "sub")], f"{a_file} is not a folder")
    assert a_file.read_text() == "keep\n"
    for args, blocked in ((["simulate", "--trace", f"jobs:{jobs}"], "jct-cdf.png"),
                          (["whatif", "--design", str(design), "--trace", f"jobs:{jobs}"], "whatif.png"),
                          (["design", "--servers", "2", "--gpu", "H100"], "topology.svg")):
        out = tmp_path / f"out-{args[0]}"
        (out / blocked).mkdir(parents=True)
        _refused([*args, "--out", str(out)], f"--out {out}: could not write {blocked}: a folder of that name is in "
                                             "the way")
        assert [p.name for p in out.iterdir()] == [blocked], args[0]  # nothing else written, nothing left over
    out = tmp_path / "out-simulate"
    (out / "jct-cdf.png").rmdir()
    res = runner.invoke(app, ["simulate", "--trace", f"jobs:{jobs}", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["jct-cdf.png", "jobs-default.csv", "series-default.png"]
    _refused(["design", "--servers", "2", "--gpu", "H100", "--export-spec", str(tmp_path)],
             f"--export-spec {tmp_path}: Is a directory")
