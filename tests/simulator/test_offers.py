from __future__ import annotations

from gpucluster.scheduler.offers import Framework, Offer, OfferAllocator


def test_frameworks_decline_offers_without_their_data_and_drf_arbitrates() -> None:
    nodes = {f"n{i}": {"gpu": 4.0, "cpu": 16.0} for i in range(4)}
    alloc = OfferAllocator(nodes)
    shards = {"a": {"n0", "n1"}, "b": {"n2", "n3"}}

    def local(name: str):  # type: ignore[no-untyped-def]
        return lambda offer: 4 if offer.node in shards[name] else 0

    alloc.register(Framework("a", {"gpu": 1.0, "cpu": 2.0}, pending=12, decide=local("a")))
    alloc.register(Framework("b", {"gpu": 1.0, "cpu": 2.0}, pending=3, decide=local("b")))
    launched = alloc.round()
    a, b = alloc.frameworks["a"], alloc.frameworks["b"]
    assert launched == 8 + 3
    assert set(a.launched) == {"n0", "n1"} and set(b.launched) <= {"n2", "n3"}
    assert alloc.declined > 0
    alloc.release("a", "n0")
    assert alloc.free["n0"]["gpu"] == 1.0


def test_drf_order_between_greedy_frameworks() -> None:
    alloc = OfferAllocator({"n0": {"cpu": 9.0, "mem": 18.0}})
    alloc.register(Framework("A", {"cpu": 1.0, "mem": 4.0}, pending=100, decide=lambda o: 1))
    alloc.register(Framework("B", {"cpu": 3.0, "mem": 1.0}, pending=100, decide=lambda o: 1))
    alloc.round()
    assert len(alloc.frameworks["A"].launched) == 3 and len(alloc.frameworks["B"].launched) == 2
    assert isinstance(Offer("n0", {}), Offer)
