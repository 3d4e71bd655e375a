"""The speed model: consistent (speeds compose), monotone in the hardware, faithful to the catalog's published
ratios, and strict about what a job may say."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.perf import PRECISIONS, GpuPerf, JobSpeed, SpeedModel, custom_class, load_perf_catalog

CAT = load_perf_catalog()
MODEL = SpeedModel(CAT)
GPU_NAMES = sorted(CAT.gpus)
CLASS_NAMES = sorted(CAT.workloads)

gpu_names = st.sampled_from(GPU_NAMES)
class_names = st.sampled_from(CLASS_NAMES)
precisions = st.sampled_from(PRECISIONS)


@settings(max_examples=200, deadline=None)
@given(cls=class_names, ref=gpu_names, a=gpu_names, b=gpu_names, p=precisions)
def test_speeds_compose(cls: str, ref: str, a: str, b: str, p: str) -> None:
    """ref -> a -> b is ref -> b: one consistent ordering of the GPUs per class and precision."""
    w = CAT.workloads[cls]
    ga, gb, gr = CAT.gpus[a], CAT.gpus[b], CAT.gpus[ref]
    assert math.isclose(w.speed(gr, ga, p) * w.speed(ga, gb, p), w.speed(gr, gb, p), rel_tol=1e-9)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(cls=class_names, name=gpu_names, p=precisions,
       compute=st.floats(1.0, 4.0), bandwidth=st.floats(1.0, 4.0))
def test_more_compute_or_bandwidth_is_never_slower(cls: str, name: str, p: str, compute: float,
                                                   bandwidth: float) -> None:
    g = CAT.gpus[name]
    faster = dataclasses.replace(
        g, fp32=g.fp32 * compute, bf16=None if g.bf16 is None else g.bf16 * compute,
        tf32=None if g.tf32 is None else g.tf32 * compute, fp8=None if g.fp8 is None else g.fp8 * compute,
        int8=None if g.int8 is None else g.int8 * compute, memory_bw_gbs=g.memory_bw_gbs * bandwidth)
    w = CAT.workloads[cls]
    s = w.speed(g, faster, p)  # type: ignore[arg-type]
    assert s >= 1.0 - 1e-12
    assert s <= max(compute, bandwidth) + 1e-9  # never faster than the hardware got


@settings(max_examples=100, deadline=None)
@given(cls=class_names, name=gpu_names, p=precisions)
def test_shares_on_a_gpu_add_up_and_the_anchor_gives_the_class_shares(cls: str, name: str, p: str) -> None:
    w = CAT.workloads[cls]
    assert math.isclose(sum(w.shares_on(CAT.gpus[name], p)), 1.0)  # type: ignore[arg-type]
    assert np.allclose(w.shares_on(w.anchor), (w.compute, w.memory, w.host))


def test_training_on_h100_beats_l40s_by_roughly_the_published_ratio() -> None:
    h100, l40s = CAT.gpu("H100-SXM5-80GB"), CAT.gpu("L40S")
    bf16_ratio = h100.bf16 / l40s.bf16  # type: ignore[operator]  # 989.5 / 362 = 2.73
    bw_ratio = h100.memory_bw_gbs / l40s.memory_bw_gbs  # 3.88
    for cls in ("training/transformer", "training/cnn"):
        job = MODEL.job(ref_gpu="H100-SXM5-80GB", work_class=cls)
        slower = 1.0 / MODEL.factor(job, "L40S-48GB")
        assert bf16_ratio * 0.9 <= slower <= bw_ratio, cls


def test_decoding_follows_bandwidth_and_prefill_follows_compute() -> None:
    decode = MODEL.job(kind="inference", model="llama chat", ref_gpu="H100-SXM5-80GB")
    prefill = MODEL.job(kind="inference", work_class="inference/llm-prefill", ref_gpu="H100-SXM5-80GB")
    assert decode.work_class.name == "inference/llm-decode"
    # H200 = H100 compute with 4.8 instead of 3.35 TB/s: decoding gains most of the 1.43x, prefill little
    assert MODEL.factor(decode, "H200") > 1.3
    assert MODEL.factor(prefill, "H200") < 1.1
    # L40S: 0.37x the BF16 compute but only 0.26x the bandwidth of an H100
    assert MODEL.factor(decode, "L40S") < MODEL.factor(prefill, "L40S")


def test_precision_falls_back_where_a_gpu_lacks_it() -> None:
    a100, k80, v100 = CAT.gpu("A100"), CAT.gpu("K80"), CAT.gpu("V100")
    assert a100.precision_used("fp8") == "bf16" and a100.peak("fp8") == a100.peak("bf16")
    assert k80.precision_used("int8") == "fp32" and k80.precision_used("bf16") == "fp32"
    assert v100.precision_used("tf32") == "fp32"
    assert k80.peak("fp32") == pytest.approx(4.37 * 0.64)
    h100 = CAT.gpu("H100")
    fp8 = MODEL.job(ref_gpu="A100", work_class="inference/llm-prefill", precision="fp8")
    bf16 = MODEL.job(ref_gpu="A100", work_class="inference/llm-prefill", precision="bf16")
    assert fp8.factor(h100) > bf16.factor(h100)  # FP8 helps on Hopper, not on the Ampere reference


def test_the_reference_the_override_and_no_reference() -> None:
    job = MODEL.job(ref_gpu="V100", model="ResNet-50", measured={"p100": 0.4, "NVIDIA-Tesla K80": 0.12})
    assert MODEL.factor(job, "V100-SXM2-32GB") == 1.0
    assert MODEL.factor(job, "P100-PCIe-16GB") == 0.4 and MODEL.factor(job, "K80") == 0.12
    assert MODEL.factor(job, "H100") > 1.0  # not overridden: the model
    assert job.run_s(100.0, CAT.gpu("P100")) == pytest.approx(250.0)
    flat = MODEL.job(model="ResNet-50")
    assert all(MODEL.factor(flat, g) == 1.0 for g in GPU_NAMES)


def test_a_gang_over_mixed_models_runs_at_its_slowest_member() -> None:
    job = MODEL.job(ref_gpu="A100")
    assert MODEL.gang_factor(job, ["H100", "A100", "L4"]) == MODEL.factor(job, "L4") < 1.0
    assert job.gang_factor([CAT.gpu("H100"), CAT.gpu("H200")]) == job.factor(CAT.gpu("H100"))
    assert MODEL.gang_factor(job, []) == 1.0


def test_unknown_node_models_run_at_reference_speed_and_are_remembered() -> None:
    model = SpeedModel(CAT)
    job = model.job(ref_gpu="V100")
    assert model.factor(job, "G2") == 1.0 and model.unknown == {"G2"}


def test_the_matrix_is_the_factors() -> None:
    jobs = [MODEL.job(ref_gpu="V100", model=m) for m in ("ResNet-50", "LM", "A3C")]
    m = SpeedModel(CAT).matrix(jobs, ["K80", "P100", "H100", "G2"])
    assert m.shape == (3, 4)
    assert m[1, 2] == MODEL.factor(jobs[1], "H100") and (m[:, 3] == 1.0).all()
    assert (m[:, 0] < m[:, 1]).all()  # K80 slower than P100 for each


def test_a_job_may_bring_its_own_shares() -> None:
    job = MODEL.job(ref_gpu="A100", shares=(0.0, 1.0, 0.0))  # purely bandwidth-bound on its A100
    assert MODEL.factor(job, "H100") == pytest.approx(3350 / 2039)
    assert custom_class(CAT.gpu("A100"), "bf16", 1, 0, 0).speed(CAT.gpu("A100"), CAT.gpu("H100")) == \
        pytest.approx(989.5 / 312)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"ref_gpu": "X9"}, r"ref_gpu: unknown GPU model 'X9'; known: "),
    ({"ref_gpu": "A100", "precision": "fp4"}, r"precision: 'fp4' is not one of fp32, tf32, bf16, fp8, int8"),
    ({"ref_gpu": "A100", "work_class": "training/gnn"}, r"work_class: unknown work class 'training/gnn'"),
    ({"kind": "serving"}, r"kind: unknown job kind 'serving'"),
    ({"ref_gpu": "A100", "measured": {"X9": 2.0}}, r"speed.X9: unknown GPU model"),
    ({"ref_gpu": "A100", "measured": {"H100": 0.0}}, r"speed.H100: must be > 0, not 0.0"),
    ({"measured": {"H100": 2.0}}, r"speed: measured speeds need a ref_gpu"),
    ({"shares": (0.5, 0.5, 0.5), "ref_gpu": "A100"}, r"shares: .*add up to 1"),
    ({"shares": (0.5, 0.5, 0.0)}, r"shares: need a ref_gpu"),
])
def test_bad_job_descriptions_say_which_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MODEL.job(**kwargs)  # type: ignore[arg-type]


def test_records_refuse_nonsense() -> None:
    w = CAT.workloads["training/cnn"]
    with pytest.raises(ValueError, match="shares must be"):
        dataclasses.replace(w, host=0.9)
    with pytest.raises(ValueError, match="measured speed on H100 must be > 0"):
        JobSpeed(CAT.gpu("A100"), w, "bf16", {"H100": -1.0})
    g: GpuPerf = CAT.gpu("T4")
    assert g.peak("bf16") == 65.0 and g.peak("fp8") == 65.0
