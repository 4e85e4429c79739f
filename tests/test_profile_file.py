"""AICB's AIOB compute-time file: reading, writing and AICB's aggregation."""

from __future__ import annotations

import pytest

from commsweep.aiob import profile_file as pf
from commsweep.base.errors import InputError


def test_example_round_trips(reference, tmp_path):
    path = reference("aicb", "aiob_inputs", "Example.txt")
    profile = pf.read(path, require_standard=True)
    assert profile.names() == list(pf.STANDARD_SECTIONS)
    assert profile.get("Emb") == pf.OpTime(max=857, min=782, avg=799)
    out = tmp_path / "p.txt"
    pf.write(profile, out)
    assert out.read_bytes() == path.read_bytes()


def test_aicb_aggregation_of_the_example(reference):
    """The numbers of SPEC.md section 4 for Example.txt."""
    profile = pf.read(reference("aicb", "aiob_inputs", "Example.txt"))
    times = pf.aicb_compute_times(profile)
    assert (times.attention, times.mlp, times.get("Emb")) == (1_820_000, 2_478_000, 799_000)
    assert (times.grad_forward, times.grad_backward) == (16_647_000, 17_374_000)
    recompute = pf.aicb_compute_times(profile, recompute=True)
    assert recompute.attention == 1_820_000 + 512_000  # flash attention counted twice
    assert recompute.mlp == times.mlp


def test_float_times_round_like_python():
    text = "train_iter:1\nlayernorm:\n    time_gpu_max: 1\n    time_gpu_min: 0.0001\n    time_gpu_avg: 0.0005\n"
    profile = pf.parse(text)
    assert pf.render(profile) == text
    assert pf.aicb_compute_times(profile).attention == 0  # 0.5 ns; Python's round(0.5) == 0
    text = text.replace("0.0005", "0.0015")
    assert pf.aicb_compute_times(pf.parse(text)).attention == 2  # 1.5 ns rounds to even


@pytest.mark.parametrize(
    "text, line, field, words",
    [
        ("Emb:\n", 1, "train_iter", "train_iter"),
        ("train_iter:1\nEmb:\n    time_gpu_max: 3\n    time_gpu_min: 1\n", 2, "time_gpu_avg", "lacks time_gpu_avg"),
        ("train_iter:1\nEmb:\n    time_gpu_max: 3\n    time_gpu_min: -1\n    time_gpu_avg: 2\n", 4, "time_gpu_min", "negative"),
        ("train_iter:1\nEmb:\n    time_gpu_max: x\n", 3, "time_gpu_max", "non-negative number"),
        ("train_iter:1\nEmb:\n    time_gpu_max: 1\n    time_gpu_min: 2\n    time_gpu_avg: 3\n", 5, "time_gpu_avg", "min <= time_gpu_avg <= time_gpu_max"),
        ("train_iter:1\n    time_gpu_max: 1\n", 2, "time_gpu_max", "before any section"),
        ("train_iter:1\nEmb:\n    time_gpu_max: 1\n    time_gpu_max: 1\n", 4, "time_gpu_max", "given twice"),
        ("train_iter:1\nEmb\n", 2, None, "expected 'Section:'"),
        ("train_iter:1\n", 1, None, "no operator sections"),
    ],
)
def test_malformed_files_name_line_and_field(text, line, field, words):
    with pytest.raises(InputError) as info:
        pf.parse(text, source="a.txt")
    err = info.value
    assert (err.file, err.line, err.field) == ("a.txt", line, field)
    assert words in str(err)


def test_missing_standard_sections(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("train_iter:1\nEmb:\n    time_gpu_max: 1\n    time_gpu_min: 1\n    time_gpu_avg: 1\n")
    with pytest.raises(InputError, match="missing sections: layernorm"):
        pf.read(path, require_standard=True)
