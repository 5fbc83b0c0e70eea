"""The NER prompt audit's options beyond :class:`~mlflow_mia.config.NerAuditConfig`: its prompt tables.

Declared once, here (:func:`mlflow_mia.option.option`); the ``ner-audit`` flags, the
``method="ner_prompts"`` evaluator keys and the MLproject parameters are derived
from these declarations by :mod:`mlflow_mia.options.schema`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlflow_mia.config import NerAuditConfig
from mlflow_mia.option import option
from mlflow_mia.options.schema import CommonOptions, register_family

__all__ = ["NerOptions"]


@dataclass(frozen=True)
class NerOptions(CommonOptions):
    """The NER audit's prompt tables, plus :class:`~mlflow_mia.options.schema.CommonOptions`."""

    prompts: Any = option(None, "prompt table: prompt, entity_type, sentence_type, one {name} slot per prompt; a "
                          "DataFrame or a .csv/.jsonl path", metavar="PATH", default_doc="the shipped set")
    handwritten_prompts: Any = option(None, "the baselines' prompts, same form", metavar="PATH",
                                      default_doc="the shipped five per type")


register_family("ner", (NerAuditConfig, NerOptions), frozenset({"ner-audit", "ner_prompts"}))
