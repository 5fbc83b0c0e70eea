"""``method="ner_prompts"`` of the ``mia`` evaluator: the NER prompt memorization audit.

::

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

from mlflow_mia.options.ner import NerOptions
from mlflow_mia.options.schema import key_table
from mlflow_mia.options.values import mia_section

__all__ = ["NER_CONFIG_KEYS", "NerOptions", "is_ner_config", "parse_ner_config", "evaluate_ner"]


if __doc__:  # the key table, from the declarations
    __doc__ += key_table("ner_prompts") + "\n"


def __getattr__(name):
    if name == "NER_CONFIG_KEYS":  # derived from the declarations
        from mlflow_mia.options.schema import options_for

        return tuple(options_for("ner_prompts"))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_ner_config(config) -> bool:
    """True when ``evaluator_config`` selects ``method="ner_prompts"``."""
    return mia_section(config).get("method") == "ner_prompts"


def parse_ner_config(config: Mapping[str, Any] | None, *, targets: str | None = None) -> tuple:
    """``(NerAuditConfig, NerOptions)`` from a flat ``evaluator_config["mia"]`` (or the ``ner-audit`` flags).

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
    from mlflow_mia.audits.ner.audit import NerAuditConfig
    from mlflow_mia.hashing import resolve_hash_key
    from mlflow_mia.options.schema import build, parse_values

    values = parse_values("ner_prompts", mia_section(config))
    cfg = build(NerAuditConfig, values)
    options = build(NerOptions, values, label_column=values.get("label_column") or targets or "is_member",
                    hash_key=values.get("hash_key_file") or resolve_hash_key())
    return cfg, options


def evaluate_ner(*, model, dataset, run_id, evaluator_config, model_id=None):
    """The evaluator's body for ``method="ner_prompts"``; returns an ``EvaluationResult``.

    The audited model is ``target_model`` when ``model`` is None (recommended), else
    ``model`` as MLflow loaded it, with a warning (see
    :func:`~mlflow_mia.entrypoints.evaluator.evaluator_target`).

    Raises
    ------
    ValueError
        As :func:`parse_ner_config`, :func:`~mlflow_mia.audits.ner.names.check_names_table`,
        :func:`~mlflow_mia.audits.ner.audit.ner_audit` and
        :func:`~mlflow_mia.models.ner.resolve_token_classifier`.
    """
    import pandas as pd
    from mlflow.models.evaluation import EvaluationResult

    from mlflow_mia.audits.ner.audit import ner_audit
    from mlflow_mia.entrypoints.evaluator import evaluator_target
    from mlflow_mia.tracking.ner_log import log_ner_audit
    from mlflow_mia.models.ner import resolve_token_classifier, tagger_params
    from mlflow_mia.signals.entity_confidence import ConfidenceCache

    from mlflow_mia.audits.ner.names import check_names_table

    cfg, options = parse_ner_config(evaluator_config, targets=getattr(dataset, "targets_name", None))
    names = dataset.features_data
    if not isinstance(names, pd.DataFrame):
        raise ValueError("the NER audit needs `data` as a pandas DataFrame with columns name, entity_type and the "
                         "membership label")
    names = names.copy()
    label = options.label_column
    if getattr(dataset, "has_targets", False) and dataset.targets_name and dataset.targets_name not in names:
        names[dataset.targets_name] = dataset.labels_data
    names = names.rename(columns={label: "is_member"}) if label != "is_member" else names
    check_names_table(names, entity_types=cfg.entity_types)  # before the model loads
    tagger, warning = evaluator_target(model, options.target_model, resolve=resolve_token_classifier,
                                       command="ner-audit --model")
    result = ner_audit(tagger.lm, names, prompts=options.prompts, handwritten=options.handwritten_prompts,
                       config=cfg, cache=ConfidenceCache(options.cache_dir), device=options.device,
                       progress=options.progress, hash_key=options.hash_key)
    if warning:
        result.warnings.append(warning)
    artifacts = log_ner_audit(result, run_id=run_id, log_texts=options.log_texts, log_metrics=model_id is None,
                              params=tagger_params(tagger), prefix=options.metric_prefix,
                              log_samples=options.log_samples)
    metrics = {f"{options.metric_prefix}{k}": v for k, v in result.metrics.items()}
    return EvaluationResult(metrics=metrics, artifacts=artifacts, run_id=run_id)
