"""Canaries: synthetic records planted in training data with independent inclusion bits.

- :mod:`.templates`: canary templates (secret-format, PII-like, the user's own);
- :mod:`.canary_set`: :func:`~.canary_set.make_canaries` and :class:`~.canary_set.CanarySet`
  (the auditor's secret file: texts, secrets, repetition counts, inclusion bits);
- :mod:`.insert`: :func:`~.insert.insert`, the included canaries' copies placed in a list,
  a pandas Series / DataFrame or a ``datasets.Dataset`` (with ``with_digest=True``, also
  the digest of the data they were planted in, for ``--planted-in``).

This layer sits just above the core modules and imports only them.
"""

from mlflow_mia.canaries.canary_set import DEFAULT_REPETITIONS, CanarySet, make_canaries
from mlflow_mia.canaries.insert import Planted, dataset_digest, insert
from mlflow_mia.canaries.templates import DEFAULT_TEMPLATES, PII_TEMPLATES, SECRET_TEMPLATES, Template

__all__ = ["CanarySet", "make_canaries", "insert", "dataset_digest", "Planted", "Template", "DEFAULT_TEMPLATES",
           "SECRET_TEMPLATES", "PII_TEMPLATES", "DEFAULT_REPETITIONS"]
