"""The LoRA demo's adapter is made without peft's FutureWarning on transformers' deprecated alias."""

from __future__ import annotations

import warnings

from mlflow_mia.demo.lora_build import LORA_DEMO_SIZES, lora_adapter
from mlflow_mia.signals.testing import tiny_gpt2


def test_making_the_adapter_warns_of_nothing():
    base, _ = tiny_gpt2(seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = lora_adapter(base, LORA_DEMO_SIZES["small"])
    assert [str(w.message) for w in caught if "gradient_checkpointing" in str(w.message)] == []
    assert any("lora_A" in name for name, _ in model.named_parameters())
