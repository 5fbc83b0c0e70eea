"""Fixtures of the signal tests."""

from __future__ import annotations

import pytest

from mlflow_mia.signals.runtime import DeviceResults


@pytest.fixture
def host_copies(monkeypatch):
    """The length of each :meth:`DeviceResults.to_host` call made while the test runs (one per copy back)."""
    calls: list[int] = []
    real = DeviceResults.to_host

    def counted(self):
        calls.append(len(self))
        return real(self)

    monkeypatch.setattr(DeviceResults, "to_host", counted)
    return calls


@pytest.fixture
def cuda_memory(monkeypatch):
    """A module with a BERT-base config, on a CUDA device faked to have 6 GiB free, 3 GiB reserved by torch and
    1 GiB of it allocated (so 8 GiB usable for a budget); no GPU needed."""
    import torch
    from transformers import BertConfig

    model = torch.nn.Module()
    model.config = BertConfig()
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (6 << 30, 80 << 30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 3 << 30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 1 << 30)
    return model
