"""Issue 28 (round 2, item 1): the scheduling loop's tick gives the event loop back between its steps (the
scheduling passes, the monitor's evaluation, storing the events, the tick hooks), so a request waits for one step,
never for a whole tick. What is checked here is the behaviour that makes that safe, not a time: a request served
between two steps of a tick is applied and stored, the tick's own events are all stored, and a tick cancelled (the
service stops) between two steps is finished first. Before this change the tick was one call (``Service.tick``):
no step, nothing to serve in between (``tick_steps`` did not exist)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from pathlib import Path

from tests.service.inproc import in_process

GPU = {"nvidia.com/gpu": 1}


def test_requests_between_the_steps_of_a_tick_are_applied_and_nothing_is_lost(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        first = [ip.client.post("/api/v1/jobs", json={"name": f"a{i}", "resources": GPU}).json()["id"]
                 for i in range(3)]
        ip.service.clock_origin += 1.0
        steps = ip.service.tick_steps()
        next(steps)  # the first scheduling pass ran: the three jobs hold their GPUs
        served = []
        yielded = 1
        while True:
            # a request between two steps: a submission and a read of the overview
            r = ip.client.post("/api/v1/jobs", json={"name": f"mid{yielded}", "resources": GPU})
            assert r.status_code == 201, r.text
            served.append(r.json()["id"])
            assert ip.client.get("/api/v1/overview").status_code == 200
            try:
                next(steps)
            except StopIteration:
                break
            yielded += 1
        assert yielded >= 3  # passes, monitor, store, hooks: more than one step
        assert ip.service.ticks == 1
        for jid in first:
            assert ip.client.get(f"/api/v1/jobs/{jid}").json()["status"] == "running"
        ip.tick()  # the jobs served mid-tick are scheduled by the next tick
        for jid in served:
            assert ip.client.get(f"/api/v1/jobs/{jid}").json()["status"] == "running"
    with in_process(tmp_path / "d") as ip:  # and all of it was stored: a restart finds every job as it ran
        for jid in first + served:
            assert ip.client.get(f"/api/v1/jobs/{jid}").json()["status"] == "running", jid


def test_a_tick_cancelled_between_its_steps_is_finished_first(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        jid = ip.client.post("/api/v1/jobs", json={"name": "a", "resources": GPU}).json()["id"]
        ip.service.clock_origin += 1.0

        async def cancel_mid_tick() -> bool:
            task = asyncio.ensure_future(ip.service.tick_async())
            await asyncio.sleep(0)  # the tick ran its first step and gave the loop back
            assert not task.done()
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                return True
            return False

        assert asyncio.run(cancel_mid_tick())
        assert ip.service.ticks == 1 and not ip.service.unrecorded
        assert ip.client.get(f"/api/v1/jobs/{jid}").json()["status"] == "running"
    with in_process(tmp_path / "d") as ip:
        assert ip.client.get(f"/api/v1/jobs/{jid}").json()["status"] == "running"


def test_a_tick_with_many_events_stores_them_over_several_steps(tmp_path: Path) -> None:
    """A tick whose events outnumber ``RECORD_CHUNK`` (here: 1,200 jobs queued at once, each with its
    ``unschedulable`` event) stores them in chunks, one step each, so the event loop is given back in
    between; every event is stored. Before, one step stored a tick's events however many there were (main at
    77195cc: the same tick took as many steps as one with a single event)."""
    from gpucluster.service.core import RECORD_CHUNK

    with in_process(tmp_path / "d") as ip:
        ip.tenant("flood", quota_gpus=1, max_queued_jobs=2000)
        # the control plane's pass stops noting waiting jobs after CONTROL_PLANE_PASS_BUDGET_S of wall-clock time
        # (the rest are noted at the next tick); on a loaded machine that cut one tick's events short of the
        # 1,200 this test counts (2 of 4 `make unit` runs under load), so here the pass has no budget
        engine = ip.service.runtime.engine
        engine.options = dataclasses.replace(engine.options, pass_budget_s=math.inf)

        def steps_of_a_tick() -> int:
            ip.service.clock_origin += 1.0
            steps = ip.service.tick_steps()
            n = 0
            while True:
                try:
                    next(steps)
                except StopIteration:
                    return n
                n += 1

        ip.client.post("/api/v1/jobs", json={"name": "one", "tenant": "flood", "resources": GPU})
        few = steps_of_a_tick()
        ids = [ip.client.post("/api/v1/jobs", json={"name": f"f{i}", "tenant": "flood", "resources": GPU}).json()["id"]
               for i in range(1200)]
        assert len(ip.service.unrecorded) == 0
        many = steps_of_a_tick()
        assert many >= few + 1200 // RECORD_CHUNK  # 1,200 events or more: a store step per chunk
        assert not ip.service.unrecorded
        for jid in ids[:: 97] + ids[-1:]:  # stored, events and job rows: what each job waits for
            kinds = [e["kind"] for e in ip.service.store.job_events(jid)]
            assert "unschedulable" in kinds, (jid, kinds)
