"""Resolve a model reference into a :class:`~mlflow_mia.signals.MaskedLM` with a pinned identity.

Accepted references:

- ``models:/name/version``, ``models:/name@alias``, ``models:/name/latest``,
  ``models:/name/<stage>`` and ``models:/<logged model id>`` (MLflow registry);
- ``runs:/<run_id>/<path>`` and other MLflow artifact URIs;
- a local folder holding an MLflow-saved transformers model (an ``MLmodel`` file);
- a local folder holding a Hugging Face model (``config.json``);
- a :class:`mlflow.pyfunc.PyFuncModel` of the transformers flavor (what
  ``mlflow.models.evaluate`` hands to an evaluator for a string URI);
- a :class:`MaskedLM` or a ``(model, tokenizer)`` pair.

The ``model_id`` of the returned model keys the signal cache, so it is always
pinned: an alias is resolved to its version (``models:/bbc-target@candidate`` ->
``models:/bbc-target/3``), and a model without a registry identity is keyed by
the sha256 of its weights.

Model files are read only from inside the artifact or folder named (no absolute or
``..`` ``model_binary``, no symbolic link leaving it, safetensors weights unless
``trust_remote_code``; :mod:`mlflow_mia.models.files`), so the weights
digest is that of the audited artifact's own files. A folder or run artifact that
claims a registry version keeps that identity only when the registered artifact's
weights, loaded and digested by the audit, are the same: the ``mia.weights_sha256``
tag is a cache, never the proof.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from typing import Callable

from mlflow_mia.models.files import (PICKLE_WEIGHTS, check_model_files, refuse_quantized,
                                     tracking_unreachable, unresolved_uri_error)
from mlflow_mia.signals.causal_model import language_models, wrapper_for
from mlflow_mia.signals.model import MaskedLM
from mlflow_mia.models.adapters import adapter_base, adapter_config, attach, is_adapter_folder
from mlflow_mia.models.artifact import Parts, load_components, logged_model_id
from mlflow_mia.signals.identity import refuse_remote_code, weights_digest

__all__ = ["ResolvedModel", "resolve_model", "resolve_reference", "WEIGHTS_TAG"]

#: Registry tag caching a version's weights digest (a cache, never the proof: it is recomputed).
WEIGHTS_TAG = "mia.weights_sha256"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResolvedModel:
    """A loaded masked LM and where it came from.

    Attributes
    ----------
    lm : MaskedLM
        The model; ``lm.model_id`` is :attr:`resolved_uri` (or a weights digest).
    requested : str
        The reference as given (e.g. ``models:/bbc-target@candidate``).
    resolved_uri : str
        The version-pinned identity (e.g. ``models:/bbc-target/3``).
    registered_name : str or None
        Registered model name, when the model is a registry version.
    version : str or None
        Registered model version.
    also_registered_as : tuple of (str, str)
        Other registry versions pointing at the same logged model (tagged too).
    base : callable or None
        For a PEFT adapter: loads its base model alone (``reference_model: base``,
        :func:`resolve_reference`).
    """

    lm: MaskedLM
    requested: str
    resolved_uri: str
    registered_name: str | None = None
    version: str | None = None
    also_registered_as: tuple = ()
    base: Callable[[], Parts] | None = None

    @property
    def registry(self) -> tuple[str, str] | None:
        """``(name, version)`` of the registry version, or None."""
        return (self.registered_name, self.version) if self.registered_name else None

    @property
    def registry_versions(self) -> tuple:
        """Every ``(name, version)`` known to hold these weights."""
        return ((self.registry,) if self.registry else ()) + tuple(self.also_registered_as)

    def params(self, role: str) -> dict[str, str]:
        """Run parameters describing this model (``{role}_model``, ``{role}_model_version``, ...)."""
        out = {f"{role}_model": self.resolved_uri}
        if self.requested != self.resolved_uri:
            out[f"{role}_model_requested"] = self.requested
        if self.registry:
            out[f"{role}_registered_model"] = self.registered_name
            out[f"{role}_model_version"] = str(self.version)
        return out


def _client():
    from mlflow import MlflowClient

    return MlflowClient()


def _version_key(mv) -> int:
    try:
        return int(mv.version)
    except (TypeError, ValueError):
        return -1


def registry_versions_of(logged_model_id: str | None, run_id: str | None = None) -> list[tuple[str, str]]:
    """Registered model versions whose source is the logged model ``logged_model_id``.

    Returns ``[(name, version), ...]``, newest first; empty when the tracking
    server knows none (or cannot be searched).
    """
    if not logged_model_id:
        return []
    client, found = _client(), []
    try:
        found = client.search_model_versions(f"source_path='models:/{logged_model_id}'")
    except Exception as exc:  # noqa: BLE001 - a registry without this filter: fall back to run id
        log.debug("search by source_path failed: %s", exc)
        if run_id:
            try:
                found = [mv for mv in client.search_model_versions(f"run_id='{run_id}'")
                         if str(mv.source).rstrip("/").endswith(logged_model_id)]
            except Exception as exc2:  # noqa: BLE001
                log.debug("search by run_id failed: %s", exc2)
    return [(mv.name, str(mv.version)) for mv in sorted(found, key=_version_key, reverse=True)]


def _parse_models_uri(uri: str) -> tuple[str | None, str | None, str | None]:
    """``models:/...`` -> ``(name, version_or_stage, alias)``; ``(None, None, None)`` for a logged model id."""
    rest = uri[len("models:/"):].strip("/")
    if "@" in rest:
        name, alias = rest.rsplit("@", 1)
        return name, None, alias
    if "/" in rest:
        name, version = rest.rsplit("/", 1)
        return name, version, None
    return None, None, None


def _pin_registry_uri(uri: str):
    """Resolve a ``models:/`` URI to ``(pinned_uri, name, version, logged_model_id)``.

    Raises
    ------
    ValueError
        The alias, stage or version does not exist.
    """
    from mlflow.exceptions import MlflowException

    name, version, alias = _parse_models_uri(uri)
    if name is None:  # models:/<logged model id>
        model_id = uri[len("models:/"):].strip("/")
        return uri, None, None, model_id
    client = _client()
    try:
        if alias is not None:
            mv = client.get_model_version_by_alias(name, alias)
        elif version.isdigit():
            mv = client.get_model_version(name, version)
        elif version.lower() == "latest":
            versions = client.search_model_versions(f"name='{name}'")
            if not versions:
                raise ValueError(f"registered model {name!r} has no versions")
            mv = max(versions, key=_version_key)
        else:
            versions = client.get_latest_versions(name, stages=[version])
            if not versions:
                raise ValueError(f"registered model {name!r} has no version in stage {version!r}")
            mv = versions[0]
    except MlflowException as exc:
        if tracking_unreachable(exc):
            raise  # an environment fault (exit 1), not a wrong URI
        raise unresolved_uri_error(client, uri, name, exc.message) from None
    source = str(mv.source or "")
    model_id = getattr(mv, "model_id", None) or (source[len("models:/"):] if source.startswith("models:/") else None)
    return f"models:/{mv.name}/{mv.version}", mv.name, str(mv.version), model_id


def registered_weights_id(name: str, version: str) -> str | None:
    """``weights_id`` of registry version ``name/version``, computed from its registered artifacts.

    The registered model is loaded (without running shipped code, files only from
    inside its artifact) and its weights digested every time: the
    ``mia.weights_sha256`` tag on the version is only a cache of that digest for
    readers of the registry (anyone allowed to tag versions can write it), never
    the proof. A tag that disagrees is rewritten, with a warning. None when the
    version cannot be loaded as a transformers model.
    """
    from mlflow.exceptions import MlflowException

    client = _client()
    tagged = (client.get_model_version(name, str(version)).tags or {}).get(WEIGHTS_TAG)
    try:
        model = load_components(f"models:/{name}/{version}").model
    except (ValueError, OSError, MlflowException) as exc:
        log.warning("cannot load models:/%s/%s to check its weights: %s", name, version, exc)
        return None
    digest = "sha256:" + weights_digest(model)
    if tagged == digest:
        return digest
    if tagged:
        log.warning("models:/%s/%s carries %s=%s, but its registered weights digest to %s: the tag was not "
                    "written by an audit of these weights; it is replaced", name, version, WEIGHTS_TAG, tagged,
                    digest)
    try:
        client.set_model_version_tag(name, str(version), WEIGHTS_TAG, digest)
    except MlflowException as exc:  # a read-only registry: the digest is recomputed next time anyway
        log.debug("cannot store %s on %s/%s: %s", WEIGHTS_TAG, name, version, exc)
    return digest


def _resolved(lm_parts, *, requested: str, pinned: str | None, role: str,
              registry: list[tuple[str, str]], claimed: bool = False, wrapper=MaskedLM) -> ResolvedModel:
    """Wrap loaded parts; registry versions that are only ``claimed`` must hold these very weights.

    A claim comes from a file the model's owner wrote (an ``MLmodel`` in a folder, a
    pyfunc's metadata, a run's artifacts): each claimed version is kept only when
    its registered weights have the same digest, so a folder cannot borrow the
    identity (and the registry tags) of a version it is not.
    """
    model, tokenizer = lm_parts[0], lm_parts[1]
    wrapper, weights_id = wrapper_for(wrapper, model=model), None  # a text-generation model becomes a CausalLM
    if claimed and registry:
        weights_id = "sha256:" + weights_digest(model)
        rejected = [r for r in registry if registered_weights_id(*r) != weights_id]
        for name, version in rejected:
            log.warning("%s %s claims to be models:/%s/%s, but its weights differ from that version's; it is "
                        "audited as an unregistered model and no registry tag is written", role, requested, name,
                        version)
        registry = [r for r in registry if r not in rejected]
        if rejected and not registry and pinned and pinned.startswith("models:/"):
            pinned = None
    name, version = registry[0] if registry else (None, None)
    if pinned is None and registry:
        pinned = f"models:/{name}/{version}"
    lm = wrapper(model, tokenizer, model_id=pinned or weights_id, name=f"{role} {pinned or requested}")
    return ResolvedModel(lm=lm, requested=requested, resolved_uri=lm.model_id, registered_name=name,
                         version=version, also_registered_as=tuple(registry[1:]),
                         base=getattr(lm_parts, "base", None))


def resolve_model(model, *, role: str = "target", trust_remote_code: bool = False, wrapper=MaskedLM,
                  base_model: str | None = None) -> ResolvedModel:
    """Load ``model`` for an audit role (a masked LM, or a causal LM read from its config) with a pinned identity.

    The one loader of every role: target and reference masked or causal LMs, neighbour
    generators, and (``wrapper=TokenClassifier``) the NER models of the prompt audit.

    Parameters
    ----------
    model : str, os.PathLike, PyFuncModel, MaskedLM or (model, tokenizer)
        See the module docstring for the accepted forms.
    role : str
        ``"target"`` or ``"reference"``: used in names and messages.
    trust_remote_code : bool
        Allow a model whose classes are not part of transformers to run the Python
        code shipped with it. Off by default: an audit of someone else's model must
        not execute their code (``docs/explanations/security.md``).
    wrapper : type
        What the loaded ``(model, tokenizer)`` becomes: :class:`MaskedLM` (default) or
        :class:`~mlflow_mia.signals.entity_confidence.TokenClassifier`; it must take
        ``(model, tokenizer, model_id=, name=)``, offer ``from_pretrained(path,
        trust_remote_code=)`` and check its own head.
    base_model : str, optional
        For a local PEFT adapter folder: its base (a folder or MLflow model URI); default
        the adapter's own ``base_model_name_or_path`` when that is local.
    Returns
    -------
    ResolvedModel

    Raises
    ------
    ValueError
        The URI cannot be resolved, the folder does not exist, the model has no
        masked-LM head or tokenizer, or it ships code and ``trust_remote_code`` is off.
    TypeError
        An unsupported object.
    """
    if isinstance(model, ResolvedModel):
        return model
    if isinstance(model, language_models() if wrapper is MaskedLM else wrapper):
        return ResolvedModel(lm=model, requested=model.name or model.model_id, resolved_uri=model.model_id)
    if isinstance(model, tuple) and len(model) == 2:
        return _resolved(model, requested=f"in-memory {role} model", pinned=None, role=role, registry=[],
                         wrapper=wrapper)
    if _is_pyfunc(model):
        return _from_pyfunc(model, role=role, wrapper=wrapper)
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if not isinstance(model, str):
        raise TypeError(f"{role} model must be a URI, a local folder, a PyFuncModel, a {wrapper.__name__} or a "
                        f"(model, tokenizer) pair, got {type(model).__name__}")
    uri = model.strip()
    if uri.startswith("models:/"):
        pinned, name, version, model_id = _pin_registry_uri(uri)
        parts = load_components(pinned, trust_remote_code=trust_remote_code)
        registry = [(name, version)] if name else []
        others = [r for r in registry_versions_of(model_id) if r not in registry]
        if name is None and others:
            pinned = None  # a logged model that is a registry version: key the cache by the version
        return _resolved(parts, requested=uri, pinned=pinned, role=role, registry=registry + others,
                         wrapper=wrapper)
    if os.path.isdir(uri):
        if is_adapter_folder(uri):
            return _from_adapter_folder(uri, role=role, trust_remote_code=trust_remote_code, wrapper=wrapper,
                                        base_model=base_model)
        if os.path.exists(os.path.join(uri, "MLmodel")):
            # A saved MLflow model: its MLmodel names the logged model, which may be a registry version
            # (as for a PyFuncModel); otherwise the weights digest keys the cache.
            parts = load_components(uri, trust_remote_code=trust_remote_code)
            model_id, run_id = logged_model_id(uri)
            return _resolved(parts, requested=uri, pinned=None, role=role,
                             registry=registry_versions_of(model_id, run_id), claimed=True, wrapper=wrapper)
        if os.path.exists(os.path.join(uri, "config.json")):
            check_model_files(uri, source=uri, trust_remote_code=trust_remote_code)
            refuse_quantized(uri)
            lm = wrapper_for(wrapper, folder=uri).from_pretrained(uri, trust_remote_code=trust_remote_code)
            lm.name = f"{role} {uri}"
            return ResolvedModel(lm=lm, requested=uri, resolved_uri=lm.model_id)
        raise ValueError(f"{role} model folder {uri!r} holds neither an MLmodel file (an MLflow model) nor a "
                         "config.json (a Hugging Face model)")
    if "://" in uri or uri.startswith("runs:/"):
        parts = load_components(uri, trust_remote_code=trust_remote_code)
        model_id, run_id = logged_model_id(uri)
        registry = registry_versions_of(model_id, run_id)
        # A registry version keys the cache when one exists, so every URI form of these weights shares it.
        pinned = uri if uri.startswith("runs:/") and not registry else None
        return _resolved(parts, requested=uri, pinned=pinned, role=role, registry=registry, claimed=True,
                         wrapper=wrapper)
    raise ValueError(f"{role} model {uri!r} is neither a local folder nor a model URI; use models:/name/version, "
                     "models:/name@alias, runs:/<run_id>/<path> or the path of a saved model")


def _is_pyfunc(obj) -> bool:
    try:
        from mlflow.pyfunc import PyFuncModel
    except ImportError:  # pragma: no cover
        return False
    return isinstance(obj, PyFuncModel)


def _from_pyfunc(model, *, role: str, wrapper=MaskedLM) -> ResolvedModel:
    raw = model.get_raw_model()
    hf_model, tokenizer = getattr(raw, "model", None), getattr(raw, "tokenizer", None)
    if hf_model is None or tokenizer is None:
        raise ValueError(
            f"the {role} model is a {type(raw).__name__} pyfunc model; the mia evaluator needs a transformers "
            f"{'token-classification' if wrapper is not MaskedLM else 'fill-mask or text-generation'} model logged with "
            "mlflow.transformers.log_model(transformers_model={'model': ..., 'tokenizer': ...})")
    metadata = getattr(model, "metadata", None)
    model_id = getattr(metadata, "model_id", None) or getattr(model, "model_id", None)
    run_id = getattr(metadata, "run_id", None)
    flavor = (getattr(metadata, "flavors", None) or {}).get("transformers") or {}
    if flavor.get("peft_adaptor") or hasattr(hf_model, "peft_config"):
        # MLflow's pyfunc loader restores the base of a PEFT model from PEFT's wrapped names, leaving the adapted
        # layers at random: load the artifact again, as saved (mlflow_mia.models.adapters)
        if not model_id:
            raise ValueError(f"the {role} model is a PEFT adapter loaded by MLflow's pyfunc loader, whose adapted "
                             "layers it initialises at random; pass the model's URI instead (evaluator key "
                             "target_model with model=None, or mlflow-mia audit --target models:/...)")
        log.warning("the %s model is a PEFT adapter: MLflow's pyfunc loader left its adapted layers at random; "
                    "loading models:/%s again as saved (base + adapter)", role, model_id)
        hf_model, tokenizer = load_components(f"models:/{model_id}")[:2]
    registry = registry_versions_of(model_id, run_id)
    pinned = None if registry else (f"models:/{model_id}" if model_id else None)
    requested = f"models:/{model_id}" if model_id else f"pyfunc {role} model"
    return _resolved((hf_model, tokenizer), requested=requested, pinned=pinned, role=role, registry=registry,
                     claimed=True, wrapper=wrapper)


def _from_adapter_folder(folder: str, *, role: str, trust_remote_code: bool, wrapper, base_model: str | None):
    """A local PEFT adapter folder on its base (:func:`~mlflow_mia.models.adapters.adapter_base`), merged.

    The identity is the merged weights' digest, so it covers the base's and the
    adapter's weights; the remote-code and file checks apply to both folders.
    """
    check_model_files(folder, source=folder, trust_remote_code=trust_remote_code)
    refuse_remote_code(folder, source=folder)
    config = adapter_config(folder, source=folder,
                            task="token classifier" if wrapper is not MaskedLM else "language model")
    base_uri = adapter_base(config, source=folder, base_model=base_model)

    def load_base() -> Parts:
        base = resolve_model(base_uri, role=f"base of {role}", trust_remote_code=trust_remote_code, wrapper=wrapper)
        return Parts(base.lm.model, base.lm.tokenizer)

    base = load_base()
    tokenizer = base.tokenizer
    if os.path.exists(os.path.join(folder, "tokenizer_config.json")):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    model = attach(base.model, folder, source=folder)
    return _resolved(Parts(model, tokenizer, load_base), requested=folder, pinned=None, role=role, registry=[],
                     wrapper=wrapper)


def resolve_reference(uri, *, target: ResolvedModel, trust_remote_code: bool = False) -> ResolvedModel:
    """A reference model: ``"base"`` is the target adapter's own base (the seed paper's pretrained reference).

    Raises
    ------
    ValueError
        ``"base"`` for a target that is not a PEFT adapter.
    """
    if isinstance(uri, str) and uri.strip() == "base":
        if target.base is None:
            raise ValueError(f"reference 'base' names the base model of a PEFT adapter, but the target "
                             f"{target.requested} is not an adapter; give a reference model URI or folder "
                             "(--reference, evaluator key reference_model)")
        parts, label = target.base(), f"base of {target.resolved_uri}"
        resolved = _resolved(Parts(parts.model, parts.tokenizer), requested=label, pinned=None, role="reference",
                             registry=[])
        return replace(resolved, resolved_uri=label)  # its identity (the cache key) stays the weights digest
    return resolve_model(uri, role="reference", trust_remote_code=trust_remote_code)
