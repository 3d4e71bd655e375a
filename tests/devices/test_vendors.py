from __future__ import annotations

import json

import pytest

from gpucluster.devices import DeviceInputError, DeviceSettings, VendorRegistry, VendorSettings
from gpucluster.model import DeviceRequest, Policy


@pytest.fixture
def registry() -> VendorRegistry:
    return VendorRegistry.from_settings()


def pod(limits: dict[str, object], annotations: dict[str, str] | None = None) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "annotations": annotations or {}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"nvidia.com/gpu": 1}, DeviceRequest("nvidia", 1, memory_pct=100, core_milli=1000)),
        ({"nvidia.com/gpu": 2, "nvidia.com/gpumem": 3000}, DeviceRequest("nvidia", 2, memory_mib=3000)),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": 50, "nvidia.com/gpucores": 30},
         DeviceRequest("nvidia", 1, memory_pct=50, core_milli=300)),
        ({"cambricon.com/vmlu": 1, "cambricon.com/mlu.smlu.vmemory": 8},
         DeviceRequest("cambricon", 1, memory_mib=2048, core_milli=1000)),
        ({"hygon.com/dcunum": 1, "hygon.com/dcumem": 4000, "hygon.com/dcucores": 60},
         DeviceRequest("hygon", 1, memory_mib=4000, core_milli=600)),
    ],
)
def test_container_requests_follow_hami_defaults(
    registry: VendorRegistry, limits: dict[str, object], expected: DeviceRequest
) -> None:
    p = registry.parse_pod(pod(limits), "pods.yaml: document 0")
    assert p.containers[0].devices == (expected,)
    assert p.key == "team-a/p"


def test_default_memory_and_cores_from_settings() -> None:
    reg = VendorRegistry.from_settings(
        DeviceSettings({"nvidia": VendorSettings(default_memory_mib=5000, default_cores_pct=20)})
    )
    p = reg.parse_pod(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 0}), "x")
    assert p.containers[0].devices == (DeviceRequest("nvidia", 1, memory_mib=5000, core_milli=200),)


@pytest.mark.parametrize(
    ("limits", "annotations", "message"),
    [
        ({"hygon.com/dcumem": 100}, {}, "needs hygon.com/dcunum"),
        ({"nvidia.com/gpu": "two"}, {}, "nvidia.com/gpu: must be an integer"),
        ({"nvidia.com/gpu": -1}, {}, "must not be negative"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 150}, {}, "gpumem-percentage: must be at most 100"),
        ({"nvidia.com/gpu": 1}, {"hami.io/gpu-scheduler-policy": "pack"}, "unknown policy 'pack'"),
        ({"nvidia.com/gpu": 1}, {"hami.io/node-scheduler-policy": "pack"}, "must be binpack or spread"),
        ({"cpu": "lots"}, {}, "requests.cpu: not a quantity"),
    ],
)
def test_bad_pods_name_the_field(
    registry: VendorRegistry, limits: dict[str, object], annotations: dict[str, str], message: str
) -> None:
    with pytest.raises(DeviceInputError, match=message) as err:
        registry.parse_pod(pod(limits, annotations), "pods.yaml: document 3")
    assert str(err.value).startswith("pods.yaml: document 3")


def test_annotations_become_constraints_and_policies(registry: VendorRegistry) -> None:
    p = registry.parse_pod(
        pod(
            {"nvidia.com/gpu": 1, "cpu": "500m", "memory": "2Gi"},
            {
                "nvidia.com/use-gputype": "A100, H100",
                "nvidia.com/nouse-gpuuuid": "GPU-1",
                "hami.io/node-scheduler-policy": "spread",
                "hami.io/gpu-scheduler-policy": "binpack",
                "gpucluster.io/gang": "g1",
                "gpucluster.io/gang-min-member": "4",
            },
        ),
        "x",
    )
    assert p.constraints.per_vendor["nvidia"].use_types == ("A100", "H100")
    assert p.constraints.per_vendor["nvidia"].nouse_uuids == ("GPU-1",)
    assert (p.node_policy, p.gpu_policy) == (Policy.SPREAD, Policy.BINPACK)
    assert (p.gang, p.gang_min_member) == ("g1", 4)
    assert (p.cpu_milli, p.memory_mib) == (500, 2048)


def test_register_annotation_json_and_legacy_round_trip(registry: VendorRegistry) -> None:
    nvidia = registry["nvidia"]
    legacy = "GPU-a,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:GPU-b,10,32768,100,NVIDIA-Tesla V100,1,false:"
    devs = nvidia.parse_register(legacy, "node n1")
    assert [(d.uuid, d.index, d.numa, d.healthy) for d in devs] == [("GPU-a", 0, 0, True), ("GPU-b", 1, 1, False)]
    again = nvidia.parse_register(nvidia.encode_register(devs), "node n1")
    assert again == devs
    assert json.loads(nvidia.encode_register(devs))[0]["devmem"] == 32768


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[{]", "not valid JSON"),
        ('[{"count": 10}]', r"\[0\]\.id: missing"),
        ('[{"id": "g", "devmem": -5}]', "devmem: must not be negative"),
        ("GPU-a,10,1", "expected 'uuid,count,devmem"),
    ],
)
def test_bad_register_annotations(registry: VendorRegistry, value: str, message: str) -> None:
    with pytest.raises(DeviceInputError, match=message):
        registry["nvidia"].parse_register(value, "nodes.yaml: document 0")


def test_registered_memory_is_taken_as_scaled() -> None:
    # HAMi's device plugin registers memory already times deviceMemoryScaling; the scheduler does not scale again
    reg = VendorRegistry.from_settings(DeviceSettings({"nvidia": VendorSettings(memory_scaling=2.0)}))
    devs = reg.node_devices(
        "n", {"hami.io/node-nvidia-register": '[{"id":"GPU-x","count":4,"devmem":2000,"devcore":100,'
              '"type":"NVIDIA-A10","health":true}]'}, "x", nvlink_domain_size=0,
    )
    assert devs[0].memory_mib == 2000 and devs[0].physical_memory_mib == 1000
    assert devs[0].model == "A10" and devs[0].max_tasks == 4


def test_unknown_vendor_setting_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown device vendor"):
        VendorRegistry.from_settings(DeviceSettings({"acme": VendorSettings()}))


def test_dcu_type_matches_the_full_registered_type() -> None:
    # HAMi's documented example: use-dcutype names the full type string, prefix included
    reg = VendorRegistry.from_settings()
    devs = reg.node_devices("n", {"hami.io/node-dcu-register": "DCU-0,4,65536,100,DCU-K100_AI,0,true:"}, "n")
    assert devs[0].type_name == "DCU-K100_AI" and devs[0].model == "K100_AI"
    p = reg.parse_pod(pod({"hygon.com/dcunum": 1}, {"hygon.com/use-dcutype": "DCU-K100_AI"}), "x")
    assert p.constraints.per_vendor["hygon"].use_types == ("DCU-K100_AI",)


def test_dcu_memory_factor_multiplies_dcumem() -> None:
    reg = VendorRegistry.from_settings(DeviceSettings({"hygon": VendorSettings(memory_factor=4)}))
    p = reg.parse_pod(pod({"hygon.com/dcunum": 1, "hygon.com/dcumem": 1024}), "x")
    assert p.containers[0].devices == (DeviceRequest("hygon", 1, memory_mib=4096, core_milli=1000),)
