"""The NER prompt audit's options beyond :class:`~mlflow_mia.config.NerAuditConfig`: its prompt tables and gate.

Declared once, here (:func:`mlflow_mia.option.option`); the ``ner-audit`` flags, the
``method="ner_prompts"`` evaluator keys and the MLproject parameters are derived
from these declarations by :mod:`mlflow_mia.options.schema`. The release gate's options
(``max_tpr_at_fpr``, ``confidence``, ``allow_loose_budget``, ``clear_gate_fail``,
``tag_model_version``) are the membership audit's declarations, shared
(:func:`~mlflow_mia.option.shared_option`); :meth:`NerOptions.ner_gate` builds the
:class:`~mlflow_mia.metrics.ner_gate.NerGate` from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlflow_mia.config import MetricConfig, NerAuditConfig
from mlflow_mia.metrics.gate import Gate, check_gate_confidence
from mlflow_mia.metrics.ner_gate import NerGate
from mlflow_mia.option import option, shared_option
from mlflow_mia.options.audit import MiaOptions
from mlflow_mia.options.schema import CommonOptions, register_family

__all__ = ["NerOptions"]


@dataclass(frozen=True)
class NerOptions(CommonOptions):
    """The NER audit's prompt tables and release gate, plus :class:`~mlflow_mia.options.schema.CommonOptions`.

    Raises
    ------
    ValueError
        With a gate: a loose budget without ``allow_loose_budget``, or a ``confidence`` out of [0.95, 1).
    """

    prompts: Any = option(None, "prompt table: prompt, entity_type, sentence_type, one {name} slot per prompt; a "
                          "DataFrame or a .csv/.jsonl path", metavar="PATH", default_doc="the shipped set")
    handwritten_prompts: Any = option(None, "the baselines' prompts, same form", metavar="PATH",
                                      default_doc="the shipped five per type")
    gate: Gate | None = shared_option(MiaOptions, "gate")
    confidence: float = shared_option(MetricConfig, "confidence")
    allow_loose_budget: bool = shared_option(MiaOptions, "allow_loose_budget")
    tag_model_version: bool = shared_option(MiaOptions, "tag_model_version")
    clear_gate_fail: bool = shared_option(MiaOptions, "clear_gate_fail")

    def __post_init__(self):
        if self.gate is not None:  # refused here, before any model loads
            self.gate.check_loose(allowed=self.allow_loose_budget)
            check_gate_confidence(self.confidence, option="confidence")

    def ner_gate(self) -> NerGate | None:
        """The NER release gate of ``max_tpr_at_fpr`` at ``confidence`` (:mod:`mlflow_mia.metrics.ner_gate`);
        None without a budget."""
        return None if self.gate is None else NerGate(self.gate, self.confidence)


register_family("ner", (NerAuditConfig, NerOptions), frozenset({"ner-audit", "ner_prompts"}))
