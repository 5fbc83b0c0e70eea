"""The ``dtype`` option: the models' products in bfloat16 or float16 (autocast), log-softmax in float32.

Measured on the tiny models here (CPU): bfloat16 moves energy, PLL and causal values by at most 4e-5 relative,
float16 by 7e-6; the test allows 1e-2 (bfloat16 keeps 8 bits of mantissa, about 4e-3 per rounding).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlflow_mia.config import SignalConfig
from mlflow_mia.signals import CausalLM, MaskedLM, compute_signals
from mlflow_mia.signals.cache import SignalCache
from mlflow_mia.signals.runtime import dtype_setting, resolve_dtype
from mlflow_mia.signals.testing import tiny_bert, tiny_gpt2

TEXTS = ["the cat sat on the mat", "a dog ran to the old house and sat down", "we saw the sea and the sky"]


@pytest.mark.parametrize("kind", ["energy", "pll", "causal"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_lower_precision_stays_within_the_stated_tolerance_of_float32(kind, dtype):
    lm = CausalLM(*tiny_gpt2(seed=1)) if kind == "causal" else MaskedLM(*tiny_bert(seed=1))
    full = compute_signals(lm, TEXTS, SignalConfig(kind=kind, dtype="float32"), progress=False).values
    low = compute_signals(lm, TEXTS, SignalConfig(kind=kind, dtype=dtype), progress=False).values
    assert not np.array_equal(full, low)  # the products really ran in the lower precision
    np.testing.assert_allclose(low, full, rtol=1e-2)


def test_auto_is_float32_on_cpu_and_the_compute_type_is_part_of_the_cache_key(tmp_path):
    assert resolve_dtype("auto", "cpu") == torch.float32 and dtype_setting("auto", "cpu") == {}
    assert dtype_setting("bfloat16", "cpu") == {"dtype": "bfloat16"}
    with pytest.raises(ValueError, match="dtype 'float8' is not one of auto, float32, bfloat16, float16"):
        resolve_dtype("float8", "cpu")
    lm = CausalLM(*tiny_gpt2(seed=1))
    cache = SignalCache(str(tmp_path / "cache"))
    full = compute_signals(lm, TEXTS, SignalConfig(kind="causal"), cache=cache, progress=False).values
    low = compute_signals(lm, TEXTS, SignalConfig(kind="causal", dtype="bfloat16"), cache=cache, progress=False)
    assert not np.array_equal(full, low.values)  # not served from the float32 rows
