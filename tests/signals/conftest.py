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
