"""The pod template in the job API (issue 26): image, command, args, env (literal, from a Secret or ConfigMap key,
every key of one), working directory, volume mounts of PVCs/ConfigMaps/Secrets, service account and
tolerations. Accepted and shown as given, kept across a restart, each bad field a 422 naming it (nothing
accepted); the embedded backend ignores the image and simulates the run time as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs import Workload
from tests.service.inproc import in_process

FULL: dict[str, Any] = {
    "image": "registry.example:5000/ml/train:v1.2",
    "command": ["python", "-m", "train"],
    "args": ["--epochs", "3"],
    "env": [{"name": "MODE", "value": "fast"},
            {"name": "TOKEN", "secret": "hf-token", "key": "token"},
            {"name": "LR", "config_map": "hparams", "key": "lr", "optional": True}],
    "env_from": [{"config_map": "common", "prefix": "C_"}, {"secret": "creds"}],
    "working_dir": "/workspace",
    "volumes": [{"mount_path": "/data", "pvc": "datasets", "read_only": True},
                {"mount_path": "/etc/cfg", "config_map": "train-cfg"},
                {"mount_path": "/secrets/ssh", "secret": "ssh-key", "name": "ssh"}],
    "service_account": "trainer",
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                    {"key": "dedicated", "value": "ml", "effect": "NoExecute", "toleration_seconds": 60}],
}
BASE = {"name": "real", "tenant": "ml", "duration_s": 120, "resources": {"nvidia.com/gpu": 1}}


def test_the_workload_is_accepted_shown_and_kept_across_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with in_process(data) as ip:
        r = ip.client.post("/api/v1/jobs", json={**BASE, **FULL})
        assert r.status_code == 201, r.text
        job = r.json()
        for key, value in FULL.items():
            assert job[key] == value, key
        plain = ip.client.post("/api/v1/jobs", json={**BASE, "name": "plain"}).json()
        assert (plain["image"], plain["command"], plain["env"], plain["volumes"]) == ("", [], [], [])
        # the embedded backend keeps simulating the run time (the image is not run)
        for _ in range(40):
            ip.tick(10.0)
        done = ip.client.get(f"/api/v1/jobs/{job['id']}").json()
        assert done["status"] == "succeeded"
        assert done["finished_t"] - done["started_t"] == pytest.approx(120.0)
    with in_process(data) as ip:
        again = ip.client.get(f"/api/v1/jobs/{job['id']}").json()
        for key, value in FULL.items():
            assert again[key] == value, key


@pytest.mark.parametrize(("body", "where", "why"), [
    ({"image": "Not An Image"}, "image", "not an image reference"),
    ({"image": 3}, "image", "string"),
    ({"command": "python train.py"}, "command", "list"),
    ({"args": ["a" * 9000]}, "args.0", "at most 8192"),
    ({"env": [{"name": "1BAD", "value": "x"}]}, "env.0.name", "pattern"),
    ({"env": [{"name": "A", "value": "x", "secret": "s", "key": "k"}]}, "env.0", "not both"),
    ({"env": [{"name": "A", "secret": "s"}]}, "env.0.key", "required"),
    ({"env": [{"name": "A", "secret": "s", "config_map": "c", "key": "k"}]}, "env.0", "exactly one"),
    ({"env": [{"name": "A", "key": "k"}]}, "env.0", "go with secret or config_map"),
    ({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, "env.1.name", "given twice"),
    ({"env": [{"name": "A", "secret": "Bad_Name", "key": "k"}]}, "env.0.secret", "pattern"),
    ({"env": [{"name": "A", "valu": "x"}]}, "env.0.valu", "Extra inputs"),
    ({"env_from": [{}]}, "env_from.0", "exactly one"),
    ({"env_from": [{"secret": "a", "config_map": "b"}]}, "env_from.0", "exactly one"),
    ({"working_dir": "relative/dir"}, "working_dir", "pattern"),
    ({"volumes": [{"mount_path": "data", "pvc": "d"}]}, "volumes.0.mount_path", "pattern"),
    ({"volumes": [{"mount_path": "/data"}]}, "volumes.0", "exactly one of pvc, config_map, secret"),
    ({"volumes": [{"mount_path": "/d", "pvc": "a", "secret": "b"}]}, "volumes.0", "exactly one"),
    ({"volumes": [{"mount_path": "/d", "pvc": "a"}, {"mount_path": "/d", "pvc": "b"}]},
     "volumes.1.mount_path", "already volumes.0"),
    ({"volumes": [{"mount_path": "/d", "pvc": "a", "sub_path": "../etc"}]}, "volumes.0.sub_path", "'..'"),
    ({"volumes": [{"mount_path": "/a", "pvc": "a", "name": "x"}, {"mount_path": "/b", "pvc": "b", "name": "x"}]},
     "volumes.1.name", "already volumes.0"),
    ({"service_account": "Bad Account"}, "service_account", "pattern"),
    ({"tolerations": [{"operator": "Maybe"}]}, "tolerations.0.operator", "Equal"),
    ({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}, "tolerations.0.value", "empty"),
    ({"tolerations": [{"value": "v"}]}, "tolerations.0.key", "only with operator Exists"),
    ({"tolerations": [{"key": "k", "effect": "NoSchedule", "toleration_seconds": 5}]},
     "tolerations.0.toleration_seconds", "NoExecute"),
    ({"tolerations": [{"key": "k", "effect": "Sometimes"}]}, "tolerations.0.effect", "NoSchedule"),
])
def test_a_bad_workload_field_is_422_naming_it(tmp_path: Path, body: dict[str, Any], where: str, why: str) -> None:
    with in_process(tmp_path / "d") as ip:
        r = ip.client.post("/api/v1/jobs", json={**BASE, **body})
        assert r.status_code == 422, r.text
        err = r.json()
        assert err["where"] == where and why in err["error"], err
        assert ip.client.get("/api/v1/jobs").json()["total"] == 0


_names = st.from_regex(r"\A[a-z][a-z0-9-]{0,10}[a-z0-9]\Z")
_env = st.one_of(
    st.builds(lambda n, v: {"name": n, "value": v}, st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,8}\Z"),
              st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=20)),
    st.builds(lambda n, s, k: {"name": n, "secret": s, "key": k}, st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,8}\Z"),
              _names, st.from_regex(r"\A[a-z0-9._-]{1,10}\Z")),
)
_volumes = st.lists(st.builds(lambda p, kind, n, ro: {"mount_path": f"/m/{p}", kind: n, "read_only": ro},
                              _names, st.sampled_from(["pvc", "config_map", "secret"]), _names, st.booleans()),
                    max_size=4, unique_by=lambda v: v["mount_path"])


@settings(max_examples=60, deadline=None)
@given(env=st.lists(_env, max_size=5, unique_by=lambda e: e["name"]), volumes=_volumes,
       command=st.lists(st.text(max_size=12, alphabet=st.characters(min_codepoint=32, max_codepoint=126)),
                        max_size=4))
def test_a_valid_workload_reads_back_as_written(env: list[dict[str, Any]], volumes: list[dict[str, Any]],
                                                command: list[str]) -> None:
    """Property: what ``to_dict`` writes (the API answer, the store, a Job's annotation), ``from_dict`` reads back
    to the same workload."""
    raw = {"image": "busybox:1.36", "command": command, "env": env, "volumes": volumes}
    work = Workload.from_dict(raw)
    assert Workload.from_dict(work.to_dict()) == work
    assert [e["name"] for e in work.to_dict()["env"]] == [e["name"] for e in env]
