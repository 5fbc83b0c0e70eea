"""Resolve a model reference into a :class:`~mlflow_mia.signals.entity_confidence.TokenClassifier`.

The same references as :func:`mlflow_mia.integrations.models.resolve_model`
(``models:/name/version``, ``models:/name@alias``, ``runs:/...``, a folder with an
MLmodel file or a Hugging Face ``config.json``, a transformers-flavor
``PyFuncModel``, a ``(model, tokenizer)`` pair), for token-classification models.
The identity keying the confidence cache is pinned the same way: an alias is
resolved to its version, and a model without a registry identity is keyed by the
sha256 of its weights.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mlflow_mia.integrations.models import (_load_components, _logged_model_id, _pin_registry_uri,
                                            registry_versions_of)
from mlflow_mia.signals.entity_confidence import TokenClassifier

__all__ = ["ResolvedTagger", "resolve_token_classifier"]


@dataclass(frozen=True)
class ResolvedTagger:
    """A loaded token classifier and where it came from."""

    clf: TokenClassifier
    requested: str
    resolved_uri: str
    registry: tuple = ()

    def params(self) -> dict[str, str]:
        out = {"ner.model": self.resolved_uri}
        if self.requested != self.resolved_uri:
            out["ner.model_requested"] = self.requested
        if self.registry:
            out["ner.registered_model"], out["ner.model_version"] = self.registry[0]
        return out


def _tagger(parts, *, requested: str, pinned: str | None, registry) -> ResolvedTagger:
    model, tokenizer = parts
    if pinned is None and registry:
        pinned = f"models:/{registry[0][0]}/{registry[0][1]}"
    clf = TokenClassifier(model, tokenizer, model_id=pinned, name=requested)
    return ResolvedTagger(clf=clf, requested=requested, resolved_uri=clf.model_id, registry=tuple(registry))


def resolve_token_classifier(model) -> ResolvedTagger:
    """Load ``model`` as a token classifier with a version-pinned identity.

    Raises
    ------
    ValueError
        Unresolvable URI, missing folder, or a model without a token-classification
        head (e.g. a fill-mask model): the message names the fix.
    TypeError
        An unsupported object.
    """
    if isinstance(model, ResolvedTagger):
        return model
    if isinstance(model, TokenClassifier):
        return ResolvedTagger(clf=model, requested=model.name, resolved_uri=model.model_id)
    if isinstance(model, tuple) and len(model) == 2:
        return _tagger(model, requested="in-memory model", pinned=None, registry=())
    if _is_pyfunc(model):
        raw = model.get_raw_model()
        parts = (getattr(raw, "model", None), getattr(raw, "tokenizer", None))
        if parts[0] is None or parts[1] is None:
            raise ValueError(f"the model is a {type(raw).__name__} pyfunc model; the NER audit needs a transformers "
                             "token-classification model logged with mlflow.transformers.log_model("
                             "transformers_model={'model': ..., 'tokenizer': ...}, task='token-classification')")
        meta = getattr(model, "metadata", None)
        model_id = getattr(meta, "model_id", None)
        registry = registry_versions_of(model_id, getattr(meta, "run_id", None))
        pinned = None if registry else (f"models:/{model_id}" if model_id else None)
        return _tagger(parts, requested=f"models:/{model_id}" if model_id else "pyfunc model", pinned=pinned,
                       registry=registry)
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if not isinstance(model, str):
        raise TypeError(f"the model must be a URI, a folder, a PyFuncModel, a TokenClassifier or a (model, "
                        f"tokenizer) pair, got {type(model).__name__}")
    uri = model.strip()
    if uri.startswith("models:/"):
        pinned, name, version, model_id = _pin_registry_uri(uri)
        registry = [(name, version)] if name else []
        registry += [r for r in registry_versions_of(model_id) if r not in registry]
        return _tagger(_load_components(pinned), requested=uri, pinned=pinned if name else None, registry=registry)
    if os.path.isdir(uri) and not os.path.exists(os.path.join(uri, "MLmodel")):
        if not os.path.exists(os.path.join(uri, "config.json")):
            raise ValueError(f"model folder {uri!r} holds neither an MLmodel file nor a config.json")
        clf = TokenClassifier.from_pretrained(uri)
        return ResolvedTagger(clf=clf, requested=uri, resolved_uri=clf.model_id)
    if os.path.isdir(uri) or "://" in uri or uri.startswith("runs:/"):
        model_id, run_id = _logged_model_id(uri)
        registry = registry_versions_of(model_id, run_id)
        pinned = uri if uri.startswith("runs:/") and not registry else None
        return _tagger(_load_components(uri), requested=uri, pinned=pinned, registry=registry)
    raise ValueError(f"model {uri!r} is neither a local folder nor a model URI; use models:/name/version, "
                     "models:/name@alias, runs:/<run_id>/<path> or the path of a saved model")


def _is_pyfunc(obj) -> bool:
    try:
        from mlflow.pyfunc import PyFuncModel
    except ImportError:  # pragma: no cover
        return False
    return isinstance(obj, PyFuncModel)
