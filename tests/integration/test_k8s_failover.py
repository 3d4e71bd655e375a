"""Two ``gpucluster up --kubeconfig`` replicas elect a leader on a Lease; the follower serves reads; ``kill -9`` of
the leader while it admits, five rounds: the follower takes over, and no Job is admitted twice or lost
(issue 26). Real kube-apiserver, kube-controller-manager's Job controller, the test kubelet stand-in."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from test_k8s_workloads import _events_of, _gc_jobs, _kubectl, job_yaml
from up_process import ControlPlane, gpu_nodes, kubelet_fleet, leader_of, new_run, wait_until

from gpucluster.kubernetes.workloads import ADMISSION_ANNOTATION, QUEUE_LABEL, Admission

pytestmark = pytest.mark.integration

ROUNDS = 5
JOBS_PER_ROUND = 4
LEASE_S = 3


class AdmissionWatch:
    """Watches the tenant's Jobs and records every admission written on each (by whom) and which completed."""

    def __init__(self, api: Any, tenant: str) -> None:
        from kubernetes import client

        self.batch: Any = client.BatchV1Api(api)
        self.selector = f"{QUEUE_LABEL}={tenant}"
        self.admissions: dict[str, dict[str, str]] = defaultdict(dict)
        """Job name -> admission id -> the replica that wrote it."""
        self.complete: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="admission-watch")
        self._thread.start()

    def _seen(self, job: dict[str, Any]) -> None:
        meta = job.get("metadata") or {}
        name = str(meta.get("name"))
        raw = (meta.get("annotations") or {}).get(ADMISSION_ANNOTATION)
        with self._lock:
            if raw:
                adm = Admission.parse(raw, name)
                self.admissions[name][adm.id] = adm.by
            if any(c.get("type") == "Complete" and c.get("status") == "True"
                   for c in (job.get("status") or {}).get("conditions") or []):
                self.complete.add(name)

    def _run(self) -> None:
        from kubernetes import watch

        while not self._stop.is_set():
            try:
                body = json.loads(self.batch.list_namespaced_job("default", label_selector=self.selector,
                                                                 _preload_content=False).data)
                for job in body["items"]:
                    self._seen(job)
                w = watch.Watch()  # type: ignore[no-untyped-call]
                for ev in w.stream(self.batch.list_namespaced_job, "default", label_selector=self.selector,
                                   resource_version=body["metadata"]["resourceVersion"], deserialize=False,
                                   timeout_seconds=30):
                    if self._stop.is_set():
                        return
                    self._seen(ev.get("raw_object") or ev.get("object") or {})
            except Exception:
                self._stop.wait(0.2)

    def admitted_by(self, name: str) -> set[str]:
        with self._lock:
            return set(self.admissions.get(name, {}).values())

    def stop(self) -> None:
        self._stop.set()



def test_kill_9_of_the_leader_while_it_admits_loses_no_job_and_admits_none_twice(
        kube_control_plane: Any, kube_controller_manager: Any, kube_client: Any, tmp_path: Path) -> None:
    cp = kube_control_plane
    run = new_run()
    tenant = f"ha-{run}"
    args = ("--lease-name", f"lease-{run}", "--lease-duration", str(LEASE_S))
    names: list[str] = []
    takeovers: list[float] = []
    with kubelet_fleet(kube_client, gpu_nodes(run, 2, 4), tmp_path):
        watch = AdmissionWatch(kube_client, tenant)
        replicas = [ControlPlane(cp.kubeconfig, tmp_path, *args, "--identity", f"r{i}", data=f"r{i}")
                    for i in range(2)]
        everyone = list(replicas)
        try:
            leader = wait_until(lambda: leader_of(replicas), 60, "one replica to lead")
            for rnd in range(ROUNDS):
                batch = [f"j{rnd}-{i}-{run}" for i in range(JOBS_PER_ROUND)]
                names += batch
                _kubectl(cp, "apply", "-f", "-", stdin="---\n".join(
                    job_yaml(n, tenant, run, pods=2, gpus=1, env={"FAKE_RUN_S": "2"}) for n in batch))
                me = leader.overview()["kubernetes"]["identity"]
                wait_until(lambda b=batch, m=me: any(m in watch.admitted_by(n) for n in b), 60,
                           f"round {rnd}: the leader {me} to admit one of the new Jobs")
                leader.kill()  # while it admits the rest of the round
                killed_at = time.monotonic()
                replicas.remove(leader)
                fresh = ControlPlane(cp.kubeconfig, tmp_path, *args, "--identity", f"r{rnd + 2}", data=f"r{rnd + 2}",
                                     wait=False)
                replicas.append(fresh)
                everyone.append(fresh)
                leader = wait_until(lambda: leader_of(replicas), 90, f"round {rnd}: the follower to take over")
                takeovers.append(time.monotonic() - killed_at)
                wait_until(fresh.healthy, 90, f"round {rnd}: the new replica to follow")
            done = wait_until(lambda: set(names) <= watch.complete and watch.complete, 240,
                              "every Job to complete")
            twice = {n: ids for n, ids in watch.admissions.items() if len(ids) > 1}
            lost = sorted(set(names) - done)
            assert twice == {} and lost == [], (twice, lost)
            for n in names:  # at most one Admitted event per Job (a leader killed right after admitting writes none)
                assert [e["reason"] for e in _events_of(kube_client, n)].count("Admitted") <= 1, n
            # the follower serves reads: both live replicas list every job as succeeded
            for r in replicas:
                wait_until(lambda r=r: r.healthy() and {j["name"] for j in r.get(
                    "/api/v1/jobs", params={"tenant": tenant, "status": "succeeded", "limit": 500})["jobs"]}
                    >= set(names), 60, "every replica to list every job as succeeded")
            follower = next(r for r in replicas if r is not leader)
            assert not follower.leading()
            print(f"failover: {ROUNDS} rounds of kill -9, takeover after {', '.join(f'{t:.1f}' for t in takeovers)} s "
                  f"(lease {LEASE_S} s); {len(names)} Jobs, each admitted once, none lost")
        except BaseException:
            for r in everyone:
                print(f"---- {r.log.name}\n{r.output()[-2500:]}")
            raise
        finally:
            watch.stop()
            for r in everyone:
                r.stop()
            _gc_jobs(kube_client, tenant)
            subprocess.run([str(cp.bin_dir / "kubectl"), "--kubeconfig", str(cp.kubeconfig), "delete", "lease",
                            f"lease-{run}", "--ignore-not-found"], capture_output=True, check=False, timeout=60)
