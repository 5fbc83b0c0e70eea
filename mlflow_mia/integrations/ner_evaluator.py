"""``method="ner_prompts"`` of the ``mia`` evaluator: the NER prompt memorization audit.

::

    mlflow.models.evaluate(
        model=None, data=names_df, targets="is_member",
        model_type="mia", evaluators=["mia"],
        evaluator_config={"mia": {"method": "ner_prompts", "target_model": "models:/wnut-ner-a@candidate",
                                  "entity_types": ["person", "geo-loc"],
                                  "dev_fraction": 0.5, "subword": "first", "seed": 0}})

``model=None`` with ``target_model`` is the recommended form: the audit's own loader
never runs code shipped with the model. With ``model="models:/..."`` MLflow's pyfunc
loader has run before the evaluator is called; the audit warns (log and report).

``data`` holds one row per name: ``name``, ``entity_type``, the label column
(``targets``; 1 = the name occurs in the model's training data) and optionally
``split`` (dev/test). Configuration keys (unknown keys are an error):

=======================  ==============================================================
``method``               ``"ner_prompts"`` (selects this audit)
``target_model``         the token classifier to audit when ``model=None`` (recommended)
``prompts``              DataFrame or .csv/.jsonl path (``prompt, entity_type, sentence_type``;
                         slot ``{name}``); default: the shipped set
``handwritten_prompts``  the baselines' prompts, same form; default: the shipped five per type
``entity_types``         list or comma string (default: every type of ``data``)
``dev_fraction``         share of names for dev when ``data`` has no split (default 0.5)
``subword``              ``"first"`` (default) or ``"mean"``
``seed``                 split, Mix-PT and bootstrap seed (default 0)
``token_budget``         padded tokens per forward pass (default 4096 CPU / 32768 CUDA)
``batch_size``           sentences per forward pass (instead of ``token_budget``)
``bootstrap_rounds``     resamples of the M-MEM intervals (default 1000; 0 = none)
``fprs``                 FPRs of the TPR metrics (default 0.1, 0.01)
``token_removal``        run the greedy token removal (default True)
``label_column``         membership column (default: ``targets``)
``device``               torch device (default: CUDA when available)
``cache_dir``            confidence cache directory (default ``~/.cache/mlflow_mia``)
``log_texts``            write raw names into ``tables/ner_names.csv`` (default False)
``log_samples``          write each name's confidences into ``tables/ner_names.csv`` (default False)
``metric_prefix``        prefix of metric, param and artifact names (default "")
``progress``             progress bars (default True)
=======================  ==============================================================
"""

from __future__ import annotations

from typing import Any, Mapping

from mlflow_mia.integrations.values import mia_section, parse_bool, parse_float, parse_int, parse_list

__all__ = ["NER_CONFIG_KEYS", "is_ner_config", "parse_ner_config", "evaluate_ner"]

NER_CONFIG_KEYS = ("method", "prompts", "handwritten_prompts", "entity_types", "dev_fraction", "subword", "seed",
                   "token_budget", "batch_size", "bootstrap_rounds", "fprs", "token_removal", "label_column",
                   "device", "cache_dir", "log_texts", "metric_prefix", "progress", "target_model", "log_samples")


def is_ner_config(config) -> bool:
    """True when ``evaluator_config`` selects ``method="ner_prompts"``."""
    return mia_section(config).get("method") == "ner_prompts"


def _list(value, what: str, cast=str):
    if value is None:
        return None
    value = parse_list(value, what=what, cast=cast)
    if not value:
        raise ValueError(f"{what} is empty")
    return value


def parse_ner_config(config: Mapping[str, Any] | None, *, targets: str | None = None) -> tuple:
    """``(NerAuditConfig, options dict)`` from a flat ``evaluator_config["mia"]``.

    Raises
    ------
    ValueError
        Unknown keys (lists the valid ones) or invalid values.
    """
    from mlflow_mia.audit_ner import NerAuditConfig

    config = mia_section(config)
    unknown = sorted(set(config) - set(NER_CONFIG_KEYS))
    if unknown:
        raise ValueError(f"unknown evaluator_config['mia'] key(s) {unknown} for method 'ner_prompts'; valid keys "
                         f"are {sorted(NER_CONFIG_KEYS)}")
    get = config.get
    fprs = _list(get("fprs"), "fprs", cast=float) or (0.1, 0.01)
    types = _list(get("entity_types"), "entity_types")

    def _opt_int(key):
        v = get(key)
        if v is None:
            return None
        if parse_int(v, key) <= 0:
            raise ValueError(f"{key} must be a positive integer, got {v!r}")
        return parse_int(v, key)

    cfg = NerAuditConfig(entity_types=tuple(types) if types else None, dev_fraction=parse_float(get("dev_fraction", 0.5), "dev_fraction"),
                         subword=str(get("subword", "first")), seed=parse_int(get("seed", 0), "seed"),
                         bootstrap_rounds=parse_int(get("bootstrap_rounds", 1000), "bootstrap_rounds"), fprs=fprs,
                         token_removal=parse_bool(get("token_removal", True), "token_removal"), token_budget=_opt_int("token_budget"),
                         batch_size=_opt_int("batch_size"))
    options = {"prompts": get("prompts"), "handwritten_prompts": get("handwritten_prompts"),
               "label_column": get("label_column") or targets or "is_member", "device": get("device"),
               "cache_dir": get("cache_dir"), "log_texts": parse_bool(get("log_texts", False), "log_texts"),
               "metric_prefix": str(get("metric_prefix") or ""), "progress": parse_bool(get("progress", True), "progress"),
               "target_model": get("target_model") or None,
               "log_samples": parse_bool(get("log_samples", False), "log_samples")}
    return cfg, options


def evaluate_ner(*, model, dataset, run_id, evaluator_config, model_id=None):
    """The evaluator's body for ``method="ner_prompts"``; returns an ``EvaluationResult``.

    The audited model is ``target_model`` when ``model`` is None (recommended), else
    ``model`` as MLflow loaded it, with a warning (see
    :func:`~mlflow_mia.integrations.evaluator.evaluator_target`).

    Raises
    ------
    ValueError
        As :func:`parse_ner_config`, :func:`~mlflow_mia.ner.names.check_names_table`,
        :func:`~mlflow_mia.audit_ner.ner_audit` and
        :func:`~mlflow_mia.integrations.ner_models.resolve_token_classifier`.
    """
    import pandas as pd
    from mlflow.models.evaluation import EvaluationResult

    from mlflow_mia.audit_ner import ner_audit
    from mlflow_mia.integrations.evaluator import evaluator_target
    from mlflow_mia.integrations.ner_logging import log_ner_audit
    from mlflow_mia.integrations.ner_models import resolve_token_classifier, tagger_params
    from mlflow_mia.signals.entity_confidence import ConfidenceCache

    cfg, options = parse_ner_config(evaluator_config, targets=getattr(dataset, "targets_name", None))
    names = dataset.features_data
    if not isinstance(names, pd.DataFrame):
        raise ValueError("the NER audit needs `data` as a pandas DataFrame with columns name, entity_type and the "
                         "membership label")
    names = names.copy()
    label = options["label_column"]
    if getattr(dataset, "has_targets", False) and dataset.targets_name and dataset.targets_name not in names:
        names[dataset.targets_name] = dataset.labels_data
    names = names.rename(columns={label: "is_member"}) if label != "is_member" else names
    tagger, warning = evaluator_target(model, options["target_model"], resolve=resolve_token_classifier,
                                       command="ner-audit --model")
    result = ner_audit(tagger.lm, names, prompts=options["prompts"], handwritten=options["handwritten_prompts"],
                       config=cfg, cache=ConfidenceCache(options["cache_dir"]), device=options["device"],
                       progress=options["progress"])
    if warning:
        result.warnings.append(warning)
    artifacts = log_ner_audit(result, run_id=run_id, log_texts=options["log_texts"], log_metrics=model_id is None,
                              params=tagger_params(tagger), prefix=options["metric_prefix"],
                              log_samples=options["log_samples"])
    metrics = {f"{options['metric_prefix']}{k}": v for k, v in result.metrics.items()}
    return EvaluationResult(metrics=metrics, artifacts=artifacts, run_id=run_id)
