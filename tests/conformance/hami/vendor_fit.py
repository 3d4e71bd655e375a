"""The ``TestDevices_Fit`` table HAMi repeats for its Cambricon and Hygon backends (same cases, same answers
as NVIDIA's), built for one device type."""

from __future__ import annotations

from tests.conformance.hami.harness import Case, Dev, case, hami_request


def fit_table(test: str, type_: str, vendor: str, mutex_count: int, uuid_key: str) -> list[Case]:
    """``test``'s cases for devices of ``type_`` (our ``vendor``); ``mutex_count`` is the split count of the
    mutex case's device; ``uuid_key`` the vendor's UUID annotation prefix (``cambricon.com``)."""

    def d(id_: str, **kw: object) -> Dev:
        return Dev(id_, type=type_, **{"count": 100, **kw})  # type: ignore[arg-type]

    def r(nums: int, memreq: int, pct: int, cores: int) -> object:
        return hami_request(nums, memreq, pct, cores, vendor)

    return [
        case(f"{test}/fit success", devices=[d("dev-0", totalmem=128), d("dev-1", totalmem=128)],
             request=r(1, 64, 0, 50), want=["dev-1"]),
        case(f"{test}/fit fail: memory not enough", devices=[d("dev-0", totalmem=128)], request=r(1, 512, 0, 50),
             fails=["CardInsufficientMemory"]),
        case(f"{test}/fit fail: core not enough", devices=[d("dev-0", totalmem=1024, usedcores=100)],
             request=r(1, 512, 0, 50), fails=["CardInsufficientCore"]),
        case(f"{test}/fit fail: user assign use uuid mismatch", devices=[d("dev-1", totalmem=1280)],
             request=r(2, 512, 0, 50), annotations={f"{uuid_key}/use-gpuuuid": "dev-0"},
             fails=["CardUuidMismatch", "NodeInsufficientDevice"]),
        case(f"{test}/fit fail: user assign no use uuid match", devices=[d("dev-0", totalmem=1280)],
             request=r(2, 512, 0, 50), annotations={f"{uuid_key}/nouse-gpuuuid": "dev-0"},
             fails=["CardUuidMismatch", "NodeInsufficientDevice"]),
        case(f"{test}/fit fail: card overused", devices=[d("dev-0", used=100, totalmem=1280)],
             request=r(1, 512, 0, 50), fails=["CardTimeSlicingExhausted"]),
        case(f"{test}/fit success: but core limit can't exceed 100", devices=[d("dev-0", totalmem=1280)],
             request=r(1, 512, 0, 120), want=["dev-0"]),
        case(f"{test}/fit fail:  card exclusively", devices=[d("dev-0", used=20, totalmem=1280)],
             request=r(1, 512, 0, 100), fails=["ExclusiveDeviceAllocateConflict"]),
        case(f"{test}/fit fail:  CardComputeUnitsExhausted",
             devices=[d("dev-0", used=20, totalmem=1280, usedcores=100)], request=r(1, 512, 0, 0),
             fails=["CardComputeUnitsExhausted"]),
        case(f"{test}/fit fail:  AllocatedCardsInsufficientRequest",
             devices=[d("dev-0", used=20, totalmem=1280, usedcores=10)], request=r(2, 512, 0, 20),
             fails=["AllocatedCardsInsufficientRequest"]),
        case(f"{test}/fit success:  memory percentage", devices=[d("dev-0", used=20, totalmem=1280, usedcores=10)],
             request=r(1, 0, 10, 20), want=["dev-0"]),
        case(f"{test}/mutex policy rejects used device", devices=[d("dev-0", used=1, count=mutex_count, totalmem=128)],
             request=r(1, 64, 0, 50), annotations={"hami.io/gpu-scheduler-policy": "mutex"},
             fails=["ExclusiveDeviceAllocateConflict"]),
        case(f"{test}/fit fail: partial allocation AllocatedCardsInsufficientRequest for multiple cards",
             devices=[d("dev-0", totalmem=1280), d("dev-1", totalmem=1280)], request=r(3, 512, 0, 20),
             fails=["AllocatedCardsInsufficientRequest"]),
        case(f"{test}/fit fail: CardNotHealth", devices=[d("dev-0", totalmem=128, health=False)],
             request=r(1, 64, 0, 50), fails=["CardNotHealth"]),
    ]
