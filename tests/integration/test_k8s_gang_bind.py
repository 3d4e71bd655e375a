"""A gang member's bind fails for real in the secondary scheduler: nothing of the gang stays bound, and the gang is
placed again (``Scheduler.bind_group``, the one group-binding routine).

The failure is the API server's own: a validating admission webhook on Bindings (served over HTTPS from this test
process, registered with a ``ValidatingWebhookConfiguration`` scoped to the test's namespace) refuses the binding of
one member. Two ways it can refuse:

* every binding of that member, dry runs included: the routine's dry-run check finds it before any member binds,
  so nothing binds at all;
* only the third real binding of the gang, once (every dry run passes): the two members bound before it stay
  bound until the refusal, and the rollback deletes them and creates them again unbound (new uids, no node), so
  no member stays bound. The next pass binds the whole gang.

The members bind in the scheduler's pending order (priority, then creation time, then name: ``run_pass``); the
pods are created concurrently and ``creationTimestamp`` counts whole seconds, so which member binds third is not
known before the pass (creations that straddle a second put g-b after g-c). The webhook refuses whichever member
comes third, and the test reads from its recorded reviews which two were bound, then checks the rollback on
exactly those.

Three nodes with one whole GPU each, of a model unique to the run (the gang needs all three). The scheduler's
passes are called by the test, so what is bound between them is what the routine left.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from k8s_helpers import bound, core_api, create_pods, gpu_pod, list_pods, registry, wait_until
from kubernetes import client

from gpucluster.kubernetes.register import NodeRegistrar
from gpucluster.kubernetes.runtime import RunOptions, build
from gpucluster.kubernetes.secondary import SecondaryScheduler
from gpucluster.model import DeviceSpec, NodeSpec
from gpucluster.model.labels import GANG_ANNOTATION, GANG_MIN_ANNOTATION

pytestmark = pytest.mark.integration

GANG = ("g-a", "g-b", "g-c")


class BindRefuser:
    """The admission webhook: records every Binding review (pod name, dry run) and refuses the pods it is told to.
    ``refuse_always``: every binding of these pods, dry runs too; ``refuse_real_number``: the real (not dry-run)
    binding with this number (1, 2, ...) among the real bindings of the test's namespace, whichever pod it binds,
    once (0: none)."""

    def __init__(self, namespace: str, workdir: Path) -> None:
        self.namespace = namespace
        self.refuse_always: set[str] = set()
        self.refuse_real_number = 0
        self._real = 0
        self.reviews: list[tuple[str, bool, bool]] = []
        """(pod, dry run, allowed) per review, in order."""
        self.hold_prefix = ""
        self.hold_real_number = 0
        """``hold_real_number``: the real binding with this number among those of pods named ``hold_prefix...``
        is held (``holding`` is set) until ``release`` is set or 30 s pass, then refused."""
        self._held_real = 0
        self.holding = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()
        cert, key = workdir / "webhook.crt", workdir / "webhook.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                        str(cert)], check=True, capture_output=True)
        self.ca_bundle = base64.b64encode(cert.read_bytes()).decode()
        refuser = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                req = review["request"]
                allowed, message = refuser.decide(req["namespace"], req["name"], bool(req.get("dryRun")))
                response: dict[str, Any] = {"uid": req["uid"], "allowed": allowed}
                if not allowed:
                    response["status"] = {"code": 403, "message": message}
                body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                   "response": response}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="bind-refuser", daemon=True)
        self.thread.start()

    def decide(self, namespace: str, pod: str, dry_run: bool) -> tuple[bool, str]:
        hold = False
        with self._lock:
            allowed = True
            if namespace == self.namespace:
                if not dry_run:
                    self._real += 1
                real_refused = not dry_run and self._real == self.refuse_real_number
                allowed = pod not in self.refuse_always and not real_refused
                if self.hold_prefix and not dry_run and pod.startswith(self.hold_prefix):
                    self._held_real += 1
                    hold = self._held_real == self.hold_real_number
                    allowed = allowed and not hold
            self.reviews.append((pod, dry_run, allowed))
        if hold:  # the binding hangs in the API server (the binder waits on it) until the test lets it fail
            self.holding.set()
            self.release.wait(30)
        return allowed, f"test webhook refuses the binding of {pod}"

    def seen(self) -> list[tuple[str, bool, bool]]:
        with self._lock:
            return list(self.reviews)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def register_webhook(kube_client: Any, refuser: BindRefuser, node: str, scheduler: str, run: str) -> str:
    """Register ``refuser`` for Bindings in its namespace and return once the API server calls it (it loads webhook
    configurations asynchronously: a dry-run binding of a probe pod to ``node`` is tried until the refusal comes
    back). Returns the configuration's name (delete it afterwards)."""
    name = f"bind-refuser-{run}.gpucluster.io"
    client.AdmissionregistrationV1Api(kube_client).create_validating_webhook_configuration({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": name,
            "clientConfig": {"url": f"https://127.0.0.1:{refuser.port}/validate", "caBundle": refuser.ca_bundle},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["bindings", "pods/binding"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": refuser.namespace}},
            "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Fail",
            "timeoutSeconds": 5,
        }],
    })
    core = core_api(kube_client)
    probe = f"probe-{run}"
    create_pods(core, refuser.namespace, [gpu_pod(probe, scheduler, run=run)])
    refuser.refuse_always.add(probe)
    binding = client.V1Binding(metadata=client.V1ObjectMeta(name=probe),
                               target=client.V1ObjectReference(api_version="v1", kind="Node", name=node))

    def refused() -> bool:
        try:
            core.create_namespaced_binding(refuser.namespace, binding, dry_run="All")
        except client.ApiException as exc:
            return exc.status == 403 and "test webhook refuses" in (exc.body or "")
        return False

    wait_until(refused, 30, "the admission webhook to be called")
    core.delete_namespaced_pod(probe, refuser.namespace, grace_period_seconds=0)
    return name


class Rig:
    def __init__(self, kube_client: Any, namespace: str, workdir: Path) -> None:
        self.run = uuid.uuid4().hex[:6]
        self.name = f"gb-{self.run}"
        self.namespace = namespace
        self.nodes = [f"gb-{self.run}-{i}" for i in range(3)]
        specs = [NodeSpec(name=n, cpu_milli=16000, memory_mib=65536, labels={"gpucluster.io/run": self.run},
                          devices=(DeviceSpec(f"GPU-{self.run}-{i}", 0, "nvidia", f"MODEL-{self.run}", 81920),))
                 for i, n in enumerate(self.nodes)]
        self.registrar = NodeRegistrar(kube_client, specs, registry())
        self.registrar.register()
        self.webhook = BindRefuser(namespace, workdir)
        opts = RunOptions(scheduler_name=self.name, handshake_timeout=3600, assume_ttl=3600, sync_timeout=30)
        self.cluster, binder, self.informer = build(kube_client, registry(), opts, identity=self.name)
        self.scheduler = SecondaryScheduler(self.cluster, binder, self.name)
        self.informer.pod_listeners.append(self.scheduler.on_pod)
        self.informer.start()
        assert self.informer.wait_synced(30), "the informer did not sync"
        wait_until(lambda: set(self.nodes) <= set(self.cluster.state.node_index), 30, "the three nodes")
        self.core = core_api(kube_client)
        self.webhook_name = register_webhook(kube_client, self.webhook, self.nodes[0], self.name, self.run)

    def gang_pods(self) -> list[dict[str, Any]]:
        gang = {GANG_ANNOTATION: "train", GANG_MIN_ANNOTATION: str(len(GANG)),
                "nvidia.com/use-gputype": f"MODEL-{self.run}"}
        return [gpu_pod(n, self.name, cores=100, mem=1000, annotations=gang, run=self.run) for n in GANG]

    def pending_uids(self) -> dict[str, str]:
        return {k.split("/")[1]: p.pod.uid for k, p in self.scheduler.pending.items()
                if k.startswith(f"{self.namespace}/")}

    def pods(self) -> dict[str, dict[str, Any]]:
        return {p["metadata"]["name"]: p for p in list_pods(self.core, self.namespace)}

    def held(self) -> set[str]:
        return {k.split("/")[1] for k in self.cluster.state.allocations if k.startswith(f"{self.namespace}/")}

    def close(self) -> None:
        self.informer.stop()
        try:
            client.AdmissionregistrationV1Api(self.core.api_client).delete_validating_webhook_configuration(
                self.webhook_name)
        finally:
            self.webhook.close()
            self.registrar.delete()


@pytest.fixture
def rig(kube_client: Any, namespace: str, tmp_path: Path) -> Iterator[Rig]:
    r = Rig(kube_client, namespace, tmp_path)
    try:
        yield r
    finally:
        r.close()


def _uids(pods: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {n: p["metadata"]["uid"] for n, p in pods.items() if n in GANG}


def test_a_member_refused_at_the_dry_run_binds_nothing_and_the_gang_binds_later(rig: Rig) -> None:
    rig.webhook.refuse_always.add("g-c")
    create_pods(rig.core, rig.namespace, rig.gang_pods())
    wait_until(lambda: set(GANG) <= set(rig.pending_uids()), 30, "the gang pending")
    before = _uids(rig.pods())
    assert rig.scheduler.run_pass() == 0
    pods = rig.pods()
    assert bound(pods.values()) == {}
    assert _uids(pods) == before  # nothing had bound, so nothing was deleted
    assert rig.held() == set() and rig.cluster.summary()["assumed"] == 0
    # only dry runs reached the webhook: c's refusal stopped the group before any real bind
    ours = [(pod, dry) for pod, dry, _ in rig.webhook.seen() if pod in GANG]
    assert ours and all(dry for _, dry in ours), ours
    assert ("g-c", True) in ours
    msgs = wait_until(lambda: (m := {n: c.get("message", "") for n, p in rig.pods().items()
                                     for c in p["status"].get("conditions") or []
                                     if c["type"] == "PodScheduled" and c["status"] == "False"}) and len(m) == 3 and m,
                      30, "PodScheduled=False on every member")
    assert all("test webhook refuses the binding of g-c" in m and "rolled back" in m for m in msgs.values()), msgs
    # the webhook lets it through now: the next pass places and binds the whole gang, one member per node
    rig.webhook.refuse_always.clear()
    assert rig.scheduler.run_pass() == 3
    assert sorted(bound(rig.pods().values()).values()) == sorted(rig.nodes)


def test_a_member_refused_after_two_bound_leaves_nothing_bound_and_the_gang_is_placed_again(rig: Rig) -> None:
    rig.webhook.refuse_real_number = 3  # the gang's third real binding, whichever member it is
    create_pods(rig.core, rig.namespace, rig.gang_pods())
    wait_until(lambda: set(GANG) <= set(rig.pending_uids()), 30, "the gang pending")
    first = _uids(rig.pods())
    created = {n: p["metadata"]["creationTimestamp"] for n, p in rig.pods().items() if n in GANG}
    assert rig.scheduler.run_pass() == 0
    assert rig.scheduler.rollbacks == 1
    # the webhook's record: every member passed its dry run, then two real bindings were allowed and the third
    # refused, in the scheduler's order (creation time, then name: the members have one priority)
    real = [(pod, ok) for pod, dry, ok in rig.webhook.seen() if pod in GANG and not dry]
    order = sorted(GANG, key=lambda n: (created[n], n))
    assert real == [(order[0], True), (order[1], True), (order[2], False)], (real, created)
    was_bound, refused = set(order[:2]), order[2]
    # the API server's view right after the pass: no member bound; the two that were bound (then rolled back) are
    # new pods, the refused one is the same pod
    pods = rig.pods()
    assert set(GANG) <= set(pods), sorted(pods)
    assert bound(pods.values()) == {}
    now = _uids(pods)
    assert now[refused] == first[refused]
    assert {n for n in GANG if now[n] != first[n]} == was_bound, (first, now)
    assert rig.held() == set() and rig.cluster.summary()["assumed"] == 0
    # the recreated members are pending again (the informer saw them); the next pass binds the whole gang
    wait_until(lambda: rig.pending_uids() == now, 30, "the recreated members pending")
    assert rig.scheduler.run_pass() == 3
    final = rig.pods()
    assert sorted(bound(final.values()).values()) == sorted(rig.nodes)
    assert _uids(final) == now
    assert rig.held() == set(GANG) and rig.cluster.summary()["assumed"] == 0
