"""Membership inference audits of masked language models, recorded in MLflow."""

from mlflow_mia.hashing import lookup_hash

__all__ = ["lookup_hash"]
