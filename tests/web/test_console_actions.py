"""Issue 32, item 8 in the dashboard, in Debian's Chromium against a real `gpucluster up` (default remediation:
disruptive actions planned only): the node drawer's cordon / uncordon / drain (each asks first) and the Alerts
page's approve / dismiss of a planned remediation change what the cluster does. On main there were no such
buttons (nor routes). At 1440x900 and 390x844; screenshots in test-artifacts/web/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.service.server import Server, start_server, submit_job, wait_for, wait_running
from tests.web.conftest import expect as _expect
from tests.web.conftest import login, shot

pytestmark = pytest.mark.integration

VIEWPORTS = [pytest.param({"width": 1440, "height": 900}, id="1440x900"),
             pytest.param({"width": 390, "height": 844}, id="390x844")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("actions") / "data"
    srv = start_server(data, "--speed", "10", "--background", "0.3", "--faults-per-hour", "0")
    yield srv
    srv.stop()


def _node(server: Server, name: str) -> dict[str, Any]:
    with server.client() as c:
        body: dict[str, Any] = c.get(f"/api/v1/nodes/{name}").json()
    return body


def _open_node(page: Any, server: Server, name: str) -> None:
    page.goto(server.url + "/#racks")
    page.locator(f"[data-testid=node-{name}]").click()
    _expect()(page.locator("#drawer-title")).to_have_text(name)


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_the_node_drawer_cordons_and_uncordons_after_asking(page: Any, server: Server,
                                                            viewport: dict[str, int]) -> None:
    expect = _expect()
    name = "infer-0020" if viewport["width"] > 400 else "infer-0021"
    page.set_viewport_size(viewport)
    login(page, server)
    _open_node(page, server, name)
    state = page.get_by_test_id("node-state")
    expect(state).to_have_text("schedulable")
    page.get_by_test_id("node-cordon").click()
    confirm = page.get_by_test_id("node-confirm")
    expect(confirm).to_contain_text(f"Cordon {name}?")
    assert _node(server, name)["schedulable"] is True  # asking changes nothing
    shot(page, f"32-node-cordon-confirm-{viewport['width']}")
    page.get_by_test_id("node-confirm-yes").click()
    expect(state).to_have_text("cordoned")
    expect(page.get_by_test_id("node-uncordon")).to_be_visible()
    expect(confirm).to_be_hidden()
    assert _node(server, name)["schedulable"] is False
    shot(page, f"32-node-cordoned-{viewport['width']}")
    page.get_by_test_id("node-uncordon").click()
    page.get_by_test_id("node-confirm-no").click()  # changed my mind
    expect(state).to_have_text("cordoned")
    page.get_by_test_id("node-uncordon").click()
    page.get_by_test_id("node-confirm-yes").click()
    expect(state).to_have_text("schedulable")
    assert _node(server, name)["schedulable"] is True


def test_the_node_drawer_drains_a_node(page: Any, server: Server) -> None:
    expect = _expect()
    job = wait_running(server, submit_job(server, {"name": "act-drained", "resources": {"nvidia.com/gpu": 1},
                                                   "duration_s": 3000})["id"])
    node = job["placements"][0]["node"]
    login(page, server)
    _open_node(page, server, node)
    page.get_by_test_id("node-drain").click()
    expect(page.get_by_test_id("node-confirm")).to_contain_text("evict")
    page.get_by_test_id("node-confirm-yes").click()
    expect(page.get_by_test_id("node-state")).to_have_text("cordoned")
    with server.client() as c:
        moved = wait_for(lambda: (j := c.get(f"/api/v1/jobs/{job['id']}").json())["placements"] != job["placements"]
                         and j, "the job off the drained node")
        assert all(p["node"] != node for p in moved["placements"])
        assert _node(server, node)["pods"] == 0 or all(
            p["job"] != job["id"] for d in _node(server, node)["devices"] for p in d["pods"])
        c.post(f"/api/v1/nodes/{node}/uncordon")
        c.delete(f"/api/v1/jobs/{job['id']}")
    shot(page, "32-node-drained")


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_approve_and_dismiss_a_planned_drain(page: Any, server: Server, viewport: dict[str, int]) -> None:
    expect = _expect()
    page.set_viewport_size(viewport)
    victims = []
    for k, model in enumerate(("H100-SXM5-80GB", "L40S-48GB")):  # two nodes, one drain each
        victims.append(wait_running(server, submit_job(server, {
            "name": f"act-victim-{viewport['width']}-{k}", "resources": {"nvidia.com/gpu": 1},
            "gpu_type": model, "duration_s": 3000})["id"]))
    with server.client() as c:
        for v in victims:
            p = v["placements"][0]
            c.post(f"/api/v1/nodes/{p['node']}/devices/{p['devices'][0]['index']}/fault")
        planned = wait_for(lambda: [r for r in c.get("/api/v1/remediations").json()["planned"]
                                    if r["action"] == "drain" and r.get("id")
                                    and r["target"].split("/")[0] in {v["placements"][0]["node"] for v in victims}],
                           "two planned drains")
        assert len(planned) == 2, planned
    login(page, server)
    page.goto(server.url + "/#alerts")
    by_node = {r["target"].split("/")[0]: r for r in planned}
    approve = by_node[victims[0]["placements"][0]["node"]]
    dismiss = by_node[victims[1]["placements"][0]["node"]]
    box = page.locator("#al-planned")
    expect(box.get_by_test_id(f"approve-{approve['id']}")).to_be_visible()
    shot(page, f"32-alerts-planned-{viewport['width']}")
    box.get_by_test_id(f"approve-{approve['id']}").click()
    expect(box.locator(f"[data-remediation='{approve['id']}']")).to_have_count(0)
    with server.client() as c:
        moved = wait_for(lambda: (j := c.get(f"/api/v1/jobs/{victims[0]['id']}").json())["placements"]
                         != victims[0]["placements"] and j, "the approved drain to move the job")
        assert moved["status"] in ("pending", "running")
        log = c.get("/api/v1/remediations").json()["log"]
        assert any(r["action"] == "drain" and r["target"].startswith(approve["target"].split("/")[0])
                   and r["outcome"] == "done" for r in log)
    expect(page.locator("#al-remed")).to_contain_text(approve["target"].split("/")[0])
    box.get_by_test_id(f"dismiss-{dismiss['id']}").click()
    expect(box.locator(f"[data-remediation='{dismiss['id']}']")).to_have_count(0)
    with server.client() as c:
        stays = c.get(f"/api/v1/jobs/{victims[1]['id']}").json()
        assert stays["status"] == "running" and stays["placements"] == victims[1]["placements"]
    shot(page, f"32-alerts-approved-{viewport['width']}")
    with server.client() as c:
        for v in victims:
            c.delete(f"/api/v1/jobs/{v['id']}")


def test_the_node_drawer_says_cpu_and_memory_are_what_its_pods_requested(page: Any, server: Server) -> None:
    """As `describe node` and `get nodes -o wide` (CPU-REQ, MEM-REQ) say it: the figures are the requests of the
    node's pods (a job that names no CPU requests none), not a measurement; on main the drawer said "x / y cores"."""
    expect = _expect()
    with server.client() as c:
        nodes = c.get("/api/v1/nodes").json()["nodes"]
    node = max(nodes, key=lambda n: n.get("cpu_used_milli", 0))
    login(page, server)
    _open_node(page, server, node["name"])
    total_cores = f"{node['cpu_milli'] // 1000:,}"
    expect(page.get_by_test_id("node-cpu")).to_have_text(
        re.compile(rf"^[\d,.]+ of {total_cores} cores requested by its pods$"))
    expect(page.get_by_test_id("node-memory")).to_have_text(re.compile(r"^[\d,.]+ of [\d,.]+ GiB requested by its pods$"))
