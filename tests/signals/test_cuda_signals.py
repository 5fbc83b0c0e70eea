"""Signals on CUDA in half precision against float32 on the CPU (skipped without a CUDA device).

The full check with throughput is ``python benchmarks/gpu_smoke.py``; these are its
small, always-collected versions on the tiny test models.
"""

import numpy as np
import pytest
import torch

from mlflow_mia.config import SignalConfig
from mlflow_mia.signals import MaskedLM, compute_signals
from mlflow_mia.signals.testing import tiny_bert

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

TEXTS = ["the cat sat on the mat", "a dog ran in the park today", "the market rose after the bank said so"]
# nats per scored token: float16 keeps about 3 decimal digits, bfloat16 about 2
TOLERANCE = {torch.float16: 0.02, torch.bfloat16: 0.1}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["energy", "pll"])
def test_masked_signals_on_cuda_match_float32_on_cpu(kind, dtype):
    model, tok = tiny_bert(seed=0)
    config = SignalConfig(kind=kind, num_masks=4)
    ref = compute_signals(MaskedLM(model, tok), TEXTS, config, device="cpu", progress=False)
    res = compute_signals(MaskedLM(model.to(device="cuda", dtype=dtype), tok), TEXTS, config, device="cuda",
                          progress=False)
    for a, b in zip(res.token_logprobs, ref.token_logprobs):
        np.testing.assert_allclose(a, b, atol=TOLERANCE[dtype], rtol=0)
    for a, b in zip(res.token_mu, ref.token_mu):
        np.testing.assert_allclose(a, b, atol=TOLERANCE[dtype], rtol=0)
