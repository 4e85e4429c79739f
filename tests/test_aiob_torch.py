"""The torch backend: AICB's operators run for real (on the CPU here, tiny models)."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from commsweep.aiob import profile_file as pf
from commsweep.aiob import torch_bench
from commsweep.base.errors import CommsweepError
from commsweep.setup.models import PRESETS, ModelSpec
from commsweep.setup.training import TrainingSetup

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="PyTorch is not installed (pip install '.[torch]')")

TINY = ["--num_layers=2", "--hidden_size=64", "--num_attention_heads=4", "--vocab_size=1000",
        "--seq_length=128", "--world_size=2", "--tensor_model_parallel_size=2"]


def test_aggregation_is_aicb_s():
    """AICB's process_all_keys: min; samples above 3 x min dropped; max and mean of the rest."""
    m = torch_bench.Measurement("Emb", (10.0, 12.0, 100.0, 11.0))
    assert m.aggregate() == pf.OpTime(max=12, min=10, avg=11)
    assert torch_bench.Measurement("x", (1.0, 2.0)).aggregate() == pf.OpTime(max=2, min=1, avg=1.5)


@needs_torch
def test_cli_on_cpu_writes_a_valid_file_and_csv(tmp_path):
    out, table = tmp_path / "p.txt", tmp_path / "p.csv"
    result = subprocess.run(
        [sys.executable, "-m", "commsweep", "profile", "--backend", "torch", "--device", "cpu", "--threads", "1",
         *TINY, "--enable_sequence_parallel", "--iters=4", "--warmup=1", "-o", str(out), "--csv", str(table)],
        capture_output=True, text=True, check=True, timeout=300,
    )
    assert "measured on cpu (1 threads) with torch" in result.stderr
    profile = pf.read(out, require_standard=True)
    assert profile.train_iter == 4
    for _, t in profile.sections:
        assert 0 < t.min <= t.avg <= t.max
    rows = list(csv.DictReader(table.open()))
    assert [r["section"] for r in rows] == list(pf.STANDARD_SECTIONS)
    assert {r["backend"] for r in rows} == {"torch"}
    # Beside the measurement, the roofline's FLOPs for the same shard (the default --gpu).
    assert int(next(r for r in rows if r["section"] == "atten_qkv")["flops"]) == 2 * 128 * 64 * 3 * 64 // 2


@needs_torch
@pytest.mark.parametrize(
    "model, kw",
    [
        (ModelSpec(name="gqa-swiglu", num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                   ffn_hidden_size=176, vocab_size=1000, swiglu=True, normalization="rmsnorm", add_bias_linear=False),
         dict(tp=2, sp=True)),
        (ModelSpec(name="moe", num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128,
                   vocab_size=1000, num_experts=4, moe_topk=2), dict(tp=1, ep=2, sp=True)),
    ],
    ids=["gqa-swiglu", "moe"],
)
def test_model_variants_run(model, kw):
    setup = TrainingSetup(model=model, world_size=4, seq_length=64, **kw)
    run = torch_bench.run(setup, device="cpu", warmup=1, iters=2, threads=1)
    assert run.profile.names() == list(pf.STANDARD_SECTIONS)
    assert all(len(m.samples) == 2 for m in run.measurements)


@needs_torch
def test_too_large_a_shard_is_refused_before_allocating():
    setup = TrainingSetup(model=PRESETS["gpt-175b"], world_size=1)
    with pytest.raises(CommsweepError, match=r"section param_time needs about \d+\.\d GiB but only"):
        torch_bench.run(setup, device="cpu")


@needs_torch
def test_cuda_requested_without_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    setup = TrainingSetup(model=PRESETS["gpt-7b"], world_size=1)
    with pytest.raises(CommsweepError, match="--device: CUDA is not available"):
        torch_bench.run(setup, device="cuda")


def test_missing_torch_is_explained(tmp_path):
    """Run the CLI with torch made unimportable: the error says how to install it."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from commsweep.orchestration.cli import main\n"
        f"sys.exit(main(['profile', '--backend', 'torch', '-o', {str(tmp_path / 'p.txt')!r}]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 2
    assert "the torch backend needs PyTorch: pip install '.[torch]'" in result.stderr
    assert not (tmp_path / "p.txt").exists()
