"""Out-of-range flag values on the offline commands (and ``up``, which refuses before it serves): each exits 2 with
a message that names the flag and why, and no traceback. (Bad *files* are fuzzed in ``test_file_fuzz.py``.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucluster.cli.main import app
from tests.cli.samples import OPENB_NODES, OPENB_PODS, POD

pytestmark = pytest.mark.usefixtures("one_command_tree")

runner = CliRunner()

SYNTH = "synthetic:20:philly:0.001"
SEED = ("--seed", "greater than or equal to 0")
KIND_NAME = "lower-case letters, digits, '.' and '-' only"

# (command line with {pods}, {design}, {dir} (an openb trace folder), {metrics} (a job
# metrics CSV) and {tmp} filled in, texts the error names)
CASES: list[tuple[str, tuple[str, ...]]] = [
    # a negative seed reached numpy's generators (ValueError: expected non-negative integer)
    ("schedule --pods {pods} --seed -1", SEED),
    ("demo --pod-count 10 --seed -3", SEED),
    # a pod count past a C long overflowed in numpy (OverflowError, exit 1)
    ("demo --pod-count 99999999999999999999", ("--pod-count", "less than or equal to")),
    (f"simulate --trace {SYNTH} --seed -1", SEED),
    # a synthetic trace of 10**20 jobs overflowed in numpy (exit 1); a fourth field was dropped without a word
    ("simulate --trace synthetic:99999999999999999999", ("synthetic:99999999999999999999", "within 1..1,000,000")),
    ("simulate --trace synthetic:5:philly:0.1:9", ("--trace 'synthetic:5:philly:0.1:9'", "'9' is one field too many")),
    (f"whatif --design {{design}} --trace {SYNTH} --seed -1", SEED),
    ("up --port 9 --data-dir {tmp}/data --seed -1", SEED),
    # a host that is no address was reported as "--port: ... is already in use"
    ("up --port 9 --data-dir {tmp}/data --host 999.1.1.1", ("--host '999.1.1.1'", "not an address")),
    # an infinite fault rate looped forever before serving, deaf to SIGTERM
    ("up --port 9 --data-dir {tmp}/data --faults-per-hour inf", ("--faults-per-hour", "less than or equal to")),
    ("experiment fgd --nodes {dir}/openb_node_list_gpu_node.csv --pods {dir}/openb_pod_list_tiny.csv --seeds -1",
     ("--seeds", "'-1'", "negative")),
    ("experiment fgd --nodes {dir}/openb_node_list_gpu_node.csv --pods {dir}/openb_pod_list_tiny.csv --seeds 3,-2-4",
     ("--seeds", "negative")),
    ("experiment fgd-sweep --trace-dir {dir} --workloads tiny --out {tmp}/sweep --jobs 1 --seeds 1--1",
     ("--seeds", "negative")),
    # a typo'd range built a set of five billion seeds (memory) before anything was checked
    ("experiment fgd --nodes {dir}/openb_node_list_gpu_node.csv --pods {dir}/openb_pod_list_tiny.csv "
     "--seeds 42-5100000000", ("--seeds", "5,099,999,959 seeds; at most 10,000")),
    # fgd-sweep took any --inflation: 0 or -1 ran every seed to an empty result (exit 0), NaN or 11 never ended
    *((f"experiment fgd-sweep --trace-dir {{dir}} --workloads tiny --out {{tmp}}/sweep --jobs 1 --seeds 1 "
       f"--inflation {value}", ("--inflation", "must be in (0, 10]")) for value in ("0", "-1", "nan", "11")),
    ("experiment fgd-sweep --trace-dir {dir} --workloads tiny --out {tmp}/sweep --seeds 1 --jobs -3",
     ("--jobs", "greater than or equal to 0")),
    # ... and forked a pool of as many processes as --jobs said, 10**20 included
    ("experiment fgd-sweep --trace-dir {dir} --workloads tiny --out {tmp}/sweep --seeds 1 --jobs 99999999999999999999",
     ("--jobs", "less than or equal to 1024")),
    # kind-config built a config of 10**20 workers (memory) or overflowed on 10**20 GPUs (OverflowError)
    ("deploy kind-config --workers 99999999999999999999", ("--workers", "must be within 1..256")),
    ("deploy kind-config --gpus 99999999999999999999", ("--gpus", "must be within 0..128")),
    ("deploy kind-config --gpus 4 --gpus-per-worker 0-99999999999", ("--gpus-per-worker[0]", "GPU 99999999999 does not exist")),
    # ... and named --placement-policy (a flag it does not have) for an unknown policy in --policies
    ("experiment fgd-sweep --trace-dir {dir} --workloads tiny --out {tmp}/sweep --seeds 1 --policies fgd,nope",
     ("--policies:", "unknown policy 'nope'")),
    # whatif compared its numbers with < and >, which NaN passes: a $nan verdict (--years) or a traceback
    *((f"whatif --design {{design}} --trace {SYNTH} {flag} {value}", (flag, why))
      for flag, why in (("--years", "must be > 0"), ("--spot-interruptions-per-day", "must be >= 0"),
                        ("--spot-restart-h", "must be >= 0"))
      for value in ("nan", "inf")),
    (f"whatif --design {{design}} --trace {SYNTH} --jct-tolerance nan", ("--jct-tolerance", "must be >= 0")),
    # design and whatif wrote their errors without the "error:" every other command's carry
    ("design --gpu H100 --servers 0", ("--servers", "must be > 0")),
    # 10**20 scalable units were reported as "servers: must be <= 50000" (a field the user did not give)
    ("design --preset dgx-h100-superpod --scalable-units 99999999999999999999",
     ("--scalable-units", "must be within 1..1000")),
    ("design --gpu H100 --servers 2 --fabric bogus", ("--fabric", "must be ib or roce")),
    (f"whatif --design {{design}} --trace {SYNTH} --years 0", ("--years", "must be > 0")),
    # k8s manifests printed objects the API server refuses (kubectl apply failed later, object by object)
    ("k8s manifests --namespace Bad_NS", ("--namespace 'Bad_NS'", "not a namespace name")),
    # NaN or a negative timeout was taken (every node stale, or never); a NaN or infinite lease raised in the
    # leader elector (a traceback)
    *((f"k8s {cmd} --listen 127.0.0.1:9 {flag} {value}", (flag, "must be > 0"))
      for cmd, flag in (("extender", "--handshake-timeout"), ("extender", "--assume-ttl"),
                        ("scheduler", "--handshake-timeout"))
      for value in ("nan", "-5", "0")),
    *((f"k8s scheduler --lease-duration {value}", ("--lease-duration", "must be within 1..3600"))
      for value in ("nan", "inf", "0.5")),
    *((f"k8s register-nodes --interval {value}", ("--interval", "must be > 0 and at most 86400"))
      for value in ("nan", "inf", "-1")),
    ("k8s manifests --namespace " + "n" * 64, ("--namespace", "at most 63 characters")),
    ("k8s manifests --release 9lives", ("--release '9lives'", "a lower-case letter")),
    ("k8s manifests --release Prod", ("--release 'Prod'", "a lower-case letter")),
    ("k8s manifests --scheduler-name My_Scheduler", ("--scheduler-name 'My_Scheduler'", "DNS subdomain")),
    # an XID is 1-999 (0 = none in DCGM_FI_DEV_XID_ERRORS; the API's fault drill takes 1-999): the drill
    # "reported" XID -5, exit 0
    *((f"monitor fault --pods {{pods}} --xid {value}", ("--xid", "greater than or equal to 1")) for value in ("-5", "0")),
    ("monitor fault --pods {pods} --xid 1000", ("--xid", "less than or equal to 999")),
    ("agent --source sim --listen 127.0.0.1:9 --duration 1 --fault train-0000:0:1000", ("--fault", "must be 1-999")),
    # the agent bound its port, then stopped at once (a deadline already past, or never reached with NaN)
    *((f"agent --source sim --listen 127.0.0.1:9 --duration {value}", ("--duration", "must be a number > 0"))
      for value in ("-1", "0", "nan")),
    # kind refuses any other cluster name (^[a-z0-9.-]+$), but only at 'kind create cluster'
    ("deploy kind-config --name Bad_Name!", ("--name 'Bad_Name!'", KIND_NAME)),
    ("deploy kind-config --name Prod", ("--name 'Prod'", KIND_NAME)),
    # --seconds was checked only for --source sim, and NaN passed that check (NaN <= 0 is false)
    *((f"analyze job j1 {source} --seconds {value}", ("--seconds", "must be a number > 0"))
      for source in ("--metrics {metrics}", "--source sim --pods {pods}") for value in ("-1", "nan", "inf")),
    # a huge finite span made ~1e11 sampling steps and never ended (at most one day: 86400 s)
    *((f"analyze job j1 --source sim --pods {{pods}} --seconds {value}", ("--seconds", "at most 86400"))
      for value in ("86400.5", "1e12")),
    # an infinite speedup put every arrival at t = 0
    *((f"simulate --trace {SYNTH} --arrival-speedup {value}", ("--arrival-speedup", "must be a finite number > 0"))
      for value in ("inf", "nan", "0", "-2")),
]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "openb_node_list_gpu_node.csv").write_text(OPENB_NODES)
    (trace / "openb_pod_list_tiny.csv").write_text(OPENB_PODS)
    (tmp_path / "pods.yaml").write_text(POD)
    (tmp_path / "design.yaml").write_text("name: d\ngpu: H100\nservers: 2\n")
    (tmp_path / "metrics.csv").write_text("job,gpu_util\nj1,50\n")
    return {"pods": str(tmp_path / "pods.yaml"), "design": str(tmp_path / "design.yaml"), "dir": str(trace),
            "tmp": str(tmp_path), "metrics": str(tmp_path / "metrics.csv")}


def _id(line: str) -> str:
    """``simulate:--seed=-1``: the command and the bad flag (the last one on the line)."""
    words = line.split()
    command = " ".join(w for w in words[:2] if not w.startswith("-"))
    return f"{command}:{words[-2]}={words[-1]}"


@pytest.mark.parametrize(("line", "expected"), CASES, ids=[_id(c[0]) for c in CASES])
def test_an_out_of_range_flag_exits_2_naming_it(files: dict[str, str], line: str, expected: tuple[str, ...]) -> None:
    args = line.format(**files).split()
    res = runner.invoke(app, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), (args, repr(res.exception))
    assert res.exit_code == 2, (args, res.output)
    output = " ".join(res.output.split())
    assert "Traceback" not in output, output
    for text in expected:
        assert text in output, (args, res.output)
    # ours read "error: ...", click's usage errors "Error: ..." (in a box where typer draws it with rich)
    assert "error" in res.stderr.lower(), "an error that does not say it is one"
    assert res.stdout == "", "an error writes nothing to stdout (a --json reader sees no partial document)"
