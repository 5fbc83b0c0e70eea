"""The NER prompt audit as an :class:`~mlflow_mia.audits.base.Audit`: its parser and its parts.

Registered (with its run and log) in :data:`mlflow_mia.pipeline.AUDITS` under the
evaluator method ``"ner_prompts"``; the ``mlflow-mia ner-audit`` command and the ``mia``
evaluator reach it there::

    mlflow.models.evaluate(
        model=None, data=names_df, targets="is_member",
        model_type="mia", evaluators=["mia"],
        evaluator_config={"mia": {"method": "ner_prompts", "target_model": "models:/wnut-ner-a@candidate",
                                  "entity_types": ["person", "geo-loc"],
                                  "dev_fraction": 0.5, "subword": "first", "seed": 0}})

``model=None`` with the *target_model* key is the recommended form: the audit's own loader
never runs code shipped with the model. With ``model="models:/..."`` MLflow's pyfunc
loader has run before the evaluator is called; the audit warns (log and report).

``data`` holds one row per name: ``name``, ``entity_type``, the label column
(``targets``; 1 = the name occurs in the model's training data) and optionally
``split`` (dev/test). Configuration keys (unknown keys are an error; the table is
generated from their declarations, :mod:`mlflow_mia.options.schema`):

"""

from __future__ import annotations

from typing import Any, Mapping

from mlflow_mia.audits.base import Audit, Settings
from mlflow_mia.audits.ner.scoring import score_ner
from mlflow_mia.audits.ner.inputs import load_names
from mlflow_mia.audits.ner.signals import ner_signals
from mlflow_mia.config import NerAuditConfig
from mlflow_mia.hashing import resolve_hash_key
from mlflow_mia.metrics.ner_gate import NerGate
from mlflow_mia.models import ner as ner_models
from mlflow_mia.options.ner import NerOptions
from mlflow_mia.options.schema import build, key_table, parse_values
from mlflow_mia.options.values import mia_section

if __doc__:  # the key table, from the declarations
    __doc__ += key_table("ner_prompts") + "\n"

__all__ = ["NER", "parse_ner_config"]


def parse_ner_config(config: Mapping[str, Any] | None, *, targets: str | None = None
                     ) -> Settings[NerAuditConfig, NerOptions]:
    """``Settings(NerAuditConfig, NerOptions)`` from a flat ``evaluator_config["mia"]`` (or the ``ner-audit`` flags).

    Every value is read and checked by its declaration before any model loads; the
    hash key is resolved here, once per audit (``hash_key_file``, else
    ``$MLFLOW_MIA_HASH_KEY``, else a random key).

    Raises
    ------
    ValueError
        Unknown keys (lists the valid ones) or invalid values (names the key and the expected form).
    FileNotFoundError
        ``hash_key_file`` does not exist.
    """
    values = parse_values("ner_prompts", mia_section(config))
    cfg = build(NerAuditConfig, values)
    options = build(NerOptions, values, label_column=values.get("label_column") or targets or "is_member",
                    hash_key=values.get("hash_key_file") or resolve_hash_key())
    return Settings(cfg, options)


def gate(settings: Settings[NerAuditConfig, NerOptions], names: Any) -> NerGate | None:
    """The NER release gate (:class:`~mlflow_mia.metrics.ner_gate.NerGate`: ``max_tpr_at_fpr`` on member against
    non-member names, at ``confidence``); None without a budget. The names table is not read."""
    return settings.options.ner_gate()


def resolve(model, settings: Settings):
    """The token classifier under audit, loaded with a version-pinned identity (``.lm`` is the tagger)."""
    return ner_models.resolve_token_classifier(model)  # looked up when called (tests replace the loader)


NER = Audit(
    name="ner_prompts", command="ner-audit", target_flag="--model",
    help="NER prompt memorization audit of a token-classification model (Xia et al. 2025)",
    description="Fill prompts with in-sample and out-of-sample entity names, read the model's entity "
                "confidence and report each prompt's M-MEM (AUC), best/worst prompts, baselines, ensembles and "
                "token removal. Without --model, builds and audits the WNUT-16 demo (two taggers on swapped "
                "halves, each the other's control).",
    parse=parse_ner_config, load_inputs=load_names, resolve=resolve, signals=ner_signals, score=score_ner,
    gate=gate)
