"""Issue 32 (minor): a job name is unique among its tenant's live jobs, as a name is in a Kubernetes namespace or a
Kueue LocalQueue's namespace. A second pending or running job of a name is refused with 409 naming the live job's
id; a finished (succeeded, failed, cancelled) job's name may be used again; another tenant's name is its own; a
job restored after a restart still holds its name. ``up --job-names shared`` lets names repeat, as Slurm does.
On main before this change every second submission was accepted (201)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.service.inproc import InProc, in_process

GPU = {"nvidia.com/gpu": 1}


def post(ip: InProc, name: str, tenant: str = "team", **kw: Any) -> Any:
    return ip.client.post("/api/v1/jobs", json={"name": name, "tenant": tenant, "resources": GPU, **kw})


def test_a_second_live_job_of_a_name_is_409_naming_the_live_one(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        first = post(ip, "train")
        assert first.status_code == 201, first.text
        jid = first.json()["id"]
        again = post(ip, "train")
        assert again.status_code == 409, again.text
        body = again.json()
        assert body["where"] == "name" and jid in body["error"] and "pending job named 'train'" in body["error"]
        assert ip.client.get("/api/v1/jobs", params={"q": "train"}).json()["total"] == 1  # nothing stored
        # another tenant's names are its own; the admin's default tenant too
        assert post(ip, "train", tenant="other").status_code == 201
        assert ip.client.post("/api/v1/jobs", json={"name": "train", "resources": GPU}).status_code == 201
        # running holds the name as well
        ip.tick()
        assert ip.client.get(f"/api/v1/jobs/{jid}").json()["status"] == "running"
        again = post(ip, "train")
        assert again.status_code == 409 and "running job named 'train'" in again.json()["error"], again.text
        # a retry with the same Idempotency-Key is the first job again, not a conflict
        keyed = ip.client.post("/api/v1/jobs", json={"name": "keyed", "tenant": "team", "resources": GPU},
                               headers={"Idempotency-Key": "k-1"})
        replay = ip.client.post("/api/v1/jobs", json={"name": "keyed", "tenant": "team", "resources": GPU},
                                headers={"Idempotency-Key": "k-1"})
        assert keyed.status_code == 201 and replay.status_code == 200 and replay.json()["id"] == keyed.json()["id"]
        # a cancelled job frees its name at once (no tick needed)
        assert ip.client.delete(f"/api/v1/jobs/{jid}").status_code == 200
        reused = post(ip, "train")
        assert reused.status_code == 201, reused.text
        assert reused.json()["id"] != jid



def test_a_body_that_is_invalid_anyway_is_422_for_its_field_before_any_name_conflict(tmp_path: Path) -> None:
    """As the Kubernetes API server answers 422 Invalid before 409 AlreadyExists: a client that resends a
    broken body under a live job's name learns what is wrong with the body (the field), not only that the name is
    taken; once the body is valid the 409 follows."""
    with in_process(tmp_path / "d") as ip:
        assert post(ip, "train").status_code == 201
        broken = post(ip, "train", volumes=[{"mount_path": "/data"}])  # a volume with no source
        assert broken.status_code == 422 and broken.json()["where"] == "volumes.0", broken.text
        unfit = post(ip, "train", resources={"nvidia.com/gpu": 1000})  # no node has 1,000 GPUs
        assert unfit.status_code == 422, unfit.text
        assert post(ip, "train").status_code == 409


def test_a_finished_jobs_name_may_be_used_again(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        jid = post(ip, "short", duration_s=5).json()["id"]
        ip.tick()
        assert post(ip, "short").status_code == 409
        ip.tick(10.0)
        assert ip.client.get(f"/api/v1/jobs/{jid}").json()["status"] == "succeeded"
        again = post(ip, "short")
        assert again.status_code == 201, again.text
        names = [j["name"] for j in ip.client.get("/api/v1/jobs", params={"q": "short"}).json()["jobs"]]
        assert names == ["short", "short"]  # the finished one stays in the history


def test_a_restored_job_still_holds_its_name(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        jid = post(ip, "keeps").json()["id"]
    with in_process(tmp_path / "d") as ip:
        r = post(ip, "keeps")
        assert r.status_code == 409 and jid in r.json()["error"], r.text


def test_shared_names_when_asked(tmp_path: Path) -> None:
    with in_process(tmp_path / "d", unique_job_names=False) as ip:
        ids = [post(ip, "sweep").json()["id"] for _ in range(3)]
        assert len(set(ids)) == 3
        ip.tick()
        assert post(ip, "sweep").status_code == 201


OPS = st.lists(st.tuples(st.sampled_from(["submit", "cancel", "tick"]), st.sampled_from(["a", "b"]),
                         st.sampled_from(["x", "y"])), min_size=1, max_size=14)


@settings(max_examples=20, deadline=None)
@given(ops=OPS)
def test_live_names_stay_unique_whatever_the_order(ops: list[tuple[str, str, str]]) -> None:
    """After any sequence of submissions, cancels and passes (jobs of 3 s finish on the way), no tenant has two
    live jobs of one name, and a submission is refused exactly when its tenant has a live job of that name."""
    with tempfile.TemporaryDirectory() as tmp, in_process(Path(tmp) / "d") as ip:
        for op, tenant, name in ops:
            live = [j for j in ip.client.get("/api/v1/jobs", params={"tenant": tenant}).json()["jobs"]
                    if j["name"] == name and j["status"] in ("pending", "running")]
            assert len(live) <= 1, live
            if op == "submit":
                r = post(ip, name, tenant=tenant, duration_s=3)
                assert r.status_code == (409 if live else 201), r.text
                if live:
                    assert live[0]["id"] in r.json()["error"]
            elif op == "cancel" and live:
                assert ip.client.delete(f"/api/v1/jobs/{live[0]['id']}").status_code == 200
            elif op == "tick":
                ip.tick(2.0)


def test_the_name_index_is_kept_not_rebuilt_per_tick(tmp_path: Path) -> None:
    """Issue 28 (round 2, item 3): the live-name index is built from every job once, then kept as jobs are
    accepted and end, so a flood of submissions between ticks costs no scan of every job per tick (on main before
    this change it was rebuilt from all jobs at the first submission after every tick: one build per tick here).
    Names stay unique after a job finishes, after a cancel and across a restart."""
    with in_process(tmp_path / "d") as ip:
        done = post(ip, "short", duration_s=5).json()["id"]
        held = post(ip, "held").json()["id"]
        cancelled = post(ip, "gone").json()["id"]
        for i in range(6):  # ticks with submissions between them
            ip.tick()
            assert post(ip, f"n{i}").status_code == 201
            assert post(ip, "held").status_code == 409
        assert ip.service.name_index_builds == 1
        ip.tick(10.0)
        assert ip.client.get(f"/api/v1/jobs/{done}").json()["status"] == "succeeded"
        assert post(ip, "short").status_code == 201  # its name was given back when it finished
        assert post(ip, "short").status_code == 409  # and taken again by the new one
        assert ip.client.delete(f"/api/v1/jobs/{cancelled}").status_code == 200
        assert post(ip, "gone").status_code == 201
        assert ip.service.name_index_builds == 1
    with in_process(tmp_path / "d") as ip:  # a restart: the restored live jobs hold their names
        for name in ("held", "short", "gone", "n0", "n5"):
            r = post(ip, name)
            assert r.status_code == 409, (name, r.text)
        assert held in post(ip, "held").json()["error"]
        assert post(ip, "fresh").status_code == 201


def test_jobs_that_end_in_a_tick_leave_the_name_index(tmp_path: Path) -> None:
    """The kept index holds live jobs only: a job that ends in a tick gives its entry back then, not when its name
    is next looked up, so a flood of short jobs does not grow the index with every name ever used."""
    with in_process(tmp_path / "d") as ip:
        post(ip, "anchor")  # builds the index
        ids = [post(ip, f"short{i}", duration_s=5).json()["id"] for i in range(4)]
        names = ip.service._live_names
        assert names is not None and {("team", f"short{i}") for i in range(4)} <= set(names)
        ip.tick(10.0)
        assert all(ip.client.get(f"/api/v1/jobs/{j}").json()["status"] == "succeeded" for j in ids)
        assert not {("team", f"short{i}") for i in range(4)} & set(ip.service._live_names or {})
