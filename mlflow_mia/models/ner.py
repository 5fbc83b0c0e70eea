"""Resolve a model reference into a :class:`~mlflow_mia.signals.entity_confidence.TokenClassifier`.

The NER audit's models go through the same loader as every other role
(:func:`mlflow_mia.models.resolve.resolve_model`): the same references
(``models:/name/version``, ``models:/name@alias``, ``runs:/...``, a folder with an
MLmodel file or a Hugging Face ``config.json``, a transformers-flavor
``PyFuncModel``, a ``(model, tokenizer)`` pair), the same refusal of code shipped
with a model, the same check that a folder claiming a registry version holds its
weights, and the confidence cache keyed by the weights.
"""

from __future__ import annotations

from mlflow_mia.models.resolve import ResolvedModel, resolve_model
from mlflow_mia.signals.entity_confidence import TokenClassifier

__all__ = ["resolve_token_classifier", "tagger_params"]


def resolve_token_classifier(model, *, trust_remote_code: bool = False) -> ResolvedModel:
    """Load ``model`` as a token classifier with a version-pinned identity (``.lm`` is the TokenClassifier).

    Raises
    ------
    ValueError
        Unresolvable URI, missing folder, code shipped with the model (without
        ``trust_remote_code``), or a model without a token-classification head
        (e.g. a fill-mask model): the message names the fix.
    TypeError
        An unsupported object.
    """
    return resolve_model(model, role="NER model", trust_remote_code=trust_remote_code, wrapper=TokenClassifier)


def tagger_params(resolved: ResolvedModel) -> dict[str, str]:
    """Run params naming the audited NER model: ``ner.model``, its request and registry version."""
    out = {"ner.model": resolved.resolved_uri}
    if resolved.requested != resolved.resolved_uri:
        out["ner.model_requested"] = resolved.requested
    if resolved.registry:
        out["ner.registered_model"], out["ner.model_version"] = resolved.registry
    return out
