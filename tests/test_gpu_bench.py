"""``benchmarks/gpu_bench.py`` on the CPU with tiny shapes: every workload, its anchor, the JSON, the docs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def gpu_bench():
    sys.path.insert(0, str(_BENCH))
    spec = importlib.util.spec_from_file_location("gpu_bench", _BENCH / "gpu_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.path.remove(str(_BENCH))


def test_without_a_gpu_it_says_why_and_exits_0(gpu_bench, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_bench.main([]) == 0
    assert "no CUDA device on this machine: nothing to measure" in capsys.readouterr().out


def test_the_result_file_is_named_after_the_gpu(gpu_bench):
    assert gpu_bench.result_path("NVIDIA H100 80GB HBM3").name == "gpu_nvidia_h100_80gb_hbm3.json"


def test_an_unknown_workload_is_refused_by_name(gpu_bench, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(SystemExit):
        gpu_bench.main(["--only", "energy,banana"])
    assert "unknown workload(s) banana; choose from energy, pll, ner, causal, neighbours, llama_7b" in capsys.readouterr().err


def test_every_workload_runs_on_cpu_with_tiny_shapes(gpu_bench, tmp_path, capsys):
    out = tmp_path / "gpu_cpu.json"
    threads = torch.get_num_threads()
    try:
        assert gpu_bench.main(["--device", "cpu", "--tiny", "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    result = json.loads(out.read_text())
    assert result["device_type"] == "cpu" and result["tiny"] and result["matmul_bf16_tflops"] > 0
    expected = {"energy_fp32", "energy_bf16", "pll_fp32", "pll_bf16", "ner", "gpt2_fp32", "gpt2_bf16", "llama_1b5",
                "neighbours_fp32", "neighbours_bf16"}
    assert set(result["cases"]) == expected and result["skipped"] == []
    for name, row in result["cases"].items():
        assert row["ratio"] > 0 and row["ours_texts_per_s"] > 0 and row["anchor_best"].startswith("batch"), name
        assert len(row["ratios"]) == 1  # one alternated pair in the tiny run
    for name in expected - {"ner"}:
        assert 0 < result["cases"][name]["share_of_matmul"] < 1, name
    # the anchors compute the same values: float32 to float rounding, bfloat16 within its precision
    assert result["cases"]["energy_fp32"]["max_abs_diff"] < 1e-4
    assert result["cases"]["pll_fp32"]["max_abs_diff"] < 1e-5
    assert result["cases"]["gpt2_fp32"]["max_abs_diff"] < 1e-5
    assert result["cases"]["energy_bf16"]["max_abs_diff"] < 0.5
    assert result["cases"]["energy_fp32"]["paper_loop"]["texts"] == 2
    assert result["cases"]["energy_bf16"]["limit"]["bare_forward_s"] > 0
    assert result["cases"]["llama_1b5"]["limit"]["ours_over_bare"] > 0
    assert result["memory_7b"]["texts"] == 3 and result["memory_7b"]["peak_gib"] is None  # no device memory on CPU
    assert result["cases"]["energy_bf16"]["goal"] == {"ratio": 5.0, "share": 0.25}
    # neighbour generation: the anchor finds the same neighbours in float32; bf16 against fp32 on the same texts
    fp32, bf16 = result["cases"]["neighbours_fp32"], result["cases"]["neighbours_bf16"]
    assert fp32["neighbours_kept_vs_anchor"] >= 0.95 and fp32["copies"] > 4 and fp32["generator_texts_per_s"] > 0
    assert 0 < bf16["neighbours_kept_vs_fp32"] <= 1 and bf16["speed_over_fp32"] > 0
    assert "energy bf16:" in capsys.readouterr().out


def _make_docs():
    spec = importlib.util.spec_from_file_location("make_docs", _BENCH / "make_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_say_when_no_gpu_run_exists_and_render_one_that_does(gpu_bench, tmp_path):
    make_docs = _make_docs()
    empty = make_docs.gpu_section(tmp_path)
    assert "**The GPU benchmark has not yet been run on a lent GPU**" in empty
    assert "python benchmarks/gpu_bench.py\npython benchmarks/make_docs.py" in empty and "TFLOP/s" not in empty
    row = {"ratio": 6.2, "ratio_min": 5.9, "ratio_max": 6.4, "texts": 2048, "dtype": "bf16", "anchor": "padded copies",
           "anchor_best": "batch 64 copies", "ours_texts_per_s": 1900.0, "anchor_texts_per_s": 306.5,
           "share_of_matmul": 0.271, "goal": {"ratio": 5.0, "share": 0.25}, "max_abs_diff": 0.03,
           "limit": {"bare_forward_share": 0.41, "ours_over_bare": 1.5, "bare_forward_s": 1.0}}
    result = {"gpu": "NVIDIA H200", "device_type": "cuda", "tiny": False, "command": "python benchmarks/gpu_bench.py",
              "date_utc": "2026-11-28 07:00", "machine": {"torch": "2.11.0+cu128"}, "transformers": "5.17.0",
              "cuda": "12.8", "matmul_bf16_tflops": 799.0, "texts_source": "BBC", "elapsed_s": 300.0,
              "cases": {"energy_bf16": row}, "skipped": [],
              "memory_7b": {"parameters_b": 6.74, "weights_gib": 12.55, "peak_gib": 20.1, "working_set_gib": 7.55,
                            "device_gib": 139.8, "texts": 256, "texts_per_s": 40.0}}
    (tmp_path / "gpu_nvidia_h200.json").write_text(json.dumps(result))
    (tmp_path / "gpu_cpu.json").write_text(json.dumps({**result, "gpu": "CPU", "device_type": "cpu", "tiny": True}))
    page = make_docs.gpu_section(tmp_path)
    assert "### NVIDIA H200" in page and "### CPU" not in page and "not yet been run" not in page
    assert "`python benchmarks/gpu_bench.py` on 2026-11-28 07:00 UTC, torch 2.11.0+cu128" in page
    assert "**799.0 TFLOP/s**" in page
    assert ("| energy_bf16 (2048 texts) | bf16 | 1900.0 texts/s | padded copies (batch 64 copies) | 306.5 texts/s | "
            "**6.20x** | 5.90-6.40 | 27.1 % | >= 5x, >= 25 % of the rate |") in page
    assert "bare forward pass over mlflow-mia's batches (no head) reaches 41.0 % of the matmul rate" in page
    assert "peak 20.1 GiB of the GPU's 139.8 GiB" in page
