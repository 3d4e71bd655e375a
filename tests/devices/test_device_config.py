from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpucluster.devices import DeviceConfigError, VendorRegistry, load_device_config, parse_device_config

# the device-config.yaml of HAMi's chart (v2.10.0, scheduler/device-configmap.yaml) with the chart's values
HAMI_CHART_CONFIG = """
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  resourceMemoryPercentageName: nvidia.com/gpumem-percentage
  resourceCoreName: nvidia.com/gpucores
  resourcePriorityName: nvidia.com/priority
  overwriteEnv: false
  defaultMemory: 0
  defaultCores: 0
  defaultGPUNum: 1
  preConfiguredDeviceMemory: 0
  memoryFactor: 1
  deviceSplitCount: 10
  deviceMemoryScaling: 1
  deviceCoreScaling: 1
  enableNumaTopology: false
  gpuCorePolicy: default
  libCudaLogLevel: 1
  runtimeClassName: ""
  migProfileAllowlist:
  - models: [ "A30" ]
    profiles: [ "1g.6gb", "2g.12gb", "4g.24gb" ]
cambricon:
  resourceCountName: cambricon.com/vmlu
  resourceMemoryName: cambricon.com/mlu.smlu.vmemory
  resourceCoreName: cambricon.com/mlu.smlu.vcore
hygon:
  resourceCountName: hygon.com/dcunum
  resourceMemoryName: hygon.com/dcumem
  resourceCoreName: hygon.com/dcucores
  memoryFactor: 1
metax:
  resourceCountName: "metax-tech.com/gpu"
"""


def test_the_charts_config_is_the_builtin_default() -> None:
    config = parse_device_config(yaml.safe_load(HAMI_CHART_CONFIG), "device-config.yaml")
    default = VendorRegistry.from_settings()
    ours = VendorRegistry.from_settings(config.settings)
    for vendor in default:
        assert ours[vendor.names.vendor].names == vendor.names
    assert ours["nvidia"].settings.split_count == 10 and ours["nvidia"].settings.default_device_count == 1
    # what the scheduler does not use is reported, not silently dropped
    assert any("nvidia.overwriteEnv" in n and "not used" in n for n in config.notes)
    assert any(n.startswith("device-config.yaml: metax:") for n in config.notes)


def test_settings_change_how_pods_are_read(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text("nvidia: {resourceCountName: hami.io/gpu, resourceMemoryName: hami.io/gpumem, "
                    "defaultMemory: 2048, defaultCores: 20, memoryFactor: 2}\nhygon: {memoryFactor: 4}\n")
    reg = VendorRegistry.from_settings(load_device_config(path).settings)
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a", "resources": {"limits": {"hami.io/gpu": 1, "nvidia.com/gpumem-percentage": 0}}},
        {"name": "b", "resources": {"limits": {"hami.io/gpumem": 100}}},
        {"name": "c", "resources": {"limits": {"hygon.com/dcunum": 1, "hygon.com/dcumem": 10}}}]}}
    a, b, c = (ctr.devices[0] for ctr in reg.parse_pod(pod, "x").containers)
    assert (a.memory_mib, a.core_milli) == (2048, 200)  # defaultMemory, defaultCores
    assert (b.count, b.memory_mib) == (1, 200)  # defaultGPUNum, memoryFactor
    assert c.memory_mib == 40


def test_a_configmap_holding_the_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hami-device"},
                                    "data": {"device-config.yaml": "nvidia:\n  deviceSplitCount: 4\n"}}))
    assert load_device_config(path).settings.vendors["nvidia"].split_count == 4


def test_every_problem_is_reported_with_a_suggestion(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("nvidia:\n  defaultMemmory: 10\n  deviceSplitCount: 0\n  defaultCores: lots\nnvidai: {}\n")
    with pytest.raises(DeviceConfigError) as err:
        load_device_config(path)
    lines = str(err.value).splitlines()
    assert f"{path}: nvidia.defaultMemmory: unknown setting; did you mean 'defaultMemory'?" in lines
    assert f"{path}: nvidia.defaultCores: must be an integer, got 'lots'" in lines
    assert f"{path}: nvidai: unknown section; did you mean 'nvidia'?" in lines
    assert f"{path}: nvidia.deviceSplitCount: must be >= 1, got 0" in lines


@pytest.mark.parametrize(("text", "message"), [
    ("[1, 2]", "must be a mapping of vendor sections"),
    ("nvidia: [1]", "nvidia: must be a mapping"),
    ("nvidia: {resourceCountName: 'two words'}", "must be a resource name"),
    ("kind: ConfigMap\ndata: {}", "data.device-config.yaml: missing"),
    ("nvidia: {a: [", "not valid YAML"),
])
def test_bad_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(DeviceConfigError, match=message):
        load_device_config(path)


def test_missing_file() -> None:
    with pytest.raises(DeviceConfigError, match=r"device-config\.yaml: no such file"):
        load_device_config("/nonexistent/device-config.yaml")
