"""The membership-inference metric as a Hugging Face ``evaluate`` module.

``evaluate.load(METRIC_PATH)`` loads :mod:`mlflow_mia.entrypoints.hf_metric.hf_metric` from
this folder, offline (a local path never reaches the Hub). Its ``compute``
scores any attack's outputs with the functions of :mod:`mlflow_mia.metrics`,
under the metric names an audit logs. This package itself does not import
``evaluate``.
"""

from pathlib import Path

__all__ = ["METRIC_PATH"]

#: Folder holding ``hf_metric.py``; pass it to ``evaluate.load``.
METRIC_PATH = str(Path(__file__).resolve().parent)
