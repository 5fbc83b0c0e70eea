"""Tests of mlflow_mia/demo/registry.py's lookup of a version by alias and tag (a fake client, no store)."""

from __future__ import annotations

from types import SimpleNamespace

from mlflow.exceptions import MlflowException

from mlflow_mia.demo.registry import tagged_version


class _Client:
    """Answers ``get_model_version_by_alias`` from a dict, raising as MLflow does for an unknown alias."""

    def __init__(self, versions):
        self.versions, self.asked = versions, []

    def get_model_version_by_alias(self, name, alias):
        self.asked.append((name, alias))
        if (name, alias) not in self.versions:
            raise MlflowException(f"Registered model alias {alias} not found.")
        return self.versions[(name, alias)]


def test_the_version_is_returned_only_when_its_tag_holds_the_value():
    kept = SimpleNamespace(version="3", tags={"key": "abc"})
    client = _Client({("shadow-0", "champion"): kept, ("untagged", "champion"): SimpleNamespace(tags=None)})
    assert tagged_version(client, "shadow-0", "champion", "key", "abc") is kept
    assert tagged_version(client, "shadow-0", "champion", "key", "other") is None  # built from other inputs
    assert tagged_version(client, "shadow-0", "champion", "other_tag", "abc") is None
    assert tagged_version(client, "untagged", "champion", "key", "abc") is None
    assert tagged_version(client, "missing", "champion", "key", "abc") is None  # no such alias
    assert client.asked[-1] == ("missing", "champion")
