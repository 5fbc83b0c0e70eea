"""Load an MLflow transformers-flavor artifact as saved, without running code shipped with it.

:func:`load_components` is the one loader of registered models, ``runs:/`` artifacts and saved
MLflow model folders (:mod:`mlflow_mia.models.resolve` names what to load): classes named in
``MLmodel`` must be transformers classes, files are read only from inside the artifact
(:mod:`mlflow_mia.models.files`), a PEFT model loads as base plus adapter
(:mod:`mlflow_mia.models.adapters`), and no weight may be left at random.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Callable, NamedTuple

from mlflow_mia.models.adapters import BASE_KEY_MAPPING, adapter_config, attach
from mlflow_mia.models.files import check_model_files, inside_folder, refuse_quantized
from mlflow_mia.signals.identity import refuse_missing_weights, refuse_remote_code
from mlflow_mia.signals.placement import load_kwargs

__all__: list[str] = ["keys_checked_after_load"]

log = logging.getLogger(__name__)


class Parts(NamedTuple):
    """A loaded model, its tokenizer, and for a PEFT adapter how to load its base alone (``base() -> Parts``)."""

    model: object
    tokenizer: object
    base: Callable[[], "Parts"] | None = None


def _local_copy(uri: str) -> str:
    """A local folder holding the MLflow model at ``uri`` (downloaded unless it is a folder already)."""
    if os.path.isdir(uri):
        return uri
    import mlflow

    return mlflow.artifacts.download_artifacts(artifact_uri=uri)


def _transformers_class(name: str | None, what: str, uri: str):
    """The transformers class called ``name``; a name transformers does not define means custom code."""
    import transformers

    if name and hasattr(transformers, name):
        return getattr(transformers, name)
    raise ValueError(
        f"{uri} declares the {what} class {name!r}, which is not part of transformers: loading it would run "
        "Python code shipped with the model. mlflow-mia never does that by default; if you trust the people who "
        "wrote this model, pass --trust-remote-code (evaluator key trust_remote_code=True)")


def load_components(uri: str, *, trust_remote_code: bool = False, base_only: bool = False):
    """``(model, tokenizer)`` of the transformers-flavor MLflow model at ``uri`` (URI or local folder).

    The model and tokenizer classes are the ones named in the ``MLmodel`` file and
    must be transformers classes, and no ``config.json`` / ``tokenizer_config.json``
    may map auto classes to shipped code: ``mlflow.transformers.load_model`` would
    turn on ``trust_remote_code`` for such a model, and an audit would run code of
    the model's authors. With ``trust_remote_code=True`` the model is loaded by
    MLflow's own loader, as its authors intended (not a PEFT model: see below).

    A model logged from a ``PeftModel`` (the flavor's ``peft_adaptor``) loads as saved:
    its base from ``model/`` with PEFT's wrapped names mapped back, then the adapter
    (:mod:`mlflow_mia.models.adapters`), merged; ``base_only`` returns the base alone.
    Every load must leave no weight missing or of another shape
    (:func:`~mlflow_mia.signals.identity.refuse_missing_weights`).

    Files are read only from inside the artifact: ``model_binary`` in ``MLmodel``
    must be a relative path without ``..``, the model and tokenizer folders must not
    be symbolic links, no link inside them may resolve outside the artifact
    (:func:`check_model_files`), and weights must be safetensors unless
    ``trust_remote_code`` is on. All of it is checked before any file is loaded.

    Raises
    ------
    ValueError
        Not a transformers-flavor model, custom code without ``trust_remote_code``,
        no tokenizer saved with the model, a model file outside the artifact, an empty model or
        tokenizer folder (an uploaded symbolic link), no weights file, pickle weights without
        ``trust_remote_code``, weights missing from the checkpoint, an adapter that does not fit,
        or files transformers cannot read (its ``OSError``, with the URI).
    """
    from mlflow.models import Model

    folder = _local_copy(uri)
    flavor = Model.load(folder).flavors.get("transformers")
    if flavor is None:
        raise ValueError(f"{uri} is not a transformers-flavor MLflow model; log it with mlflow.transformers.log_model")
    if "tokenizer" not in flavor.get("components", ()):
        raise ValueError(_NO_TOKENIZER.format(uri=uri))
    model_dir = inside_folder(folder, str(flavor.get("model_binary", "model")), what="model_binary", source=uri)
    tokenizer_dir = inside_folder(folder, os.path.join("components", "tokenizer"), what="tokenizer", source=uri)
    adapter_dir = (inside_folder(folder, str(flavor["peft_adaptor"]), what="peft_adaptor", source=uri)
                   if flavor.get("peft_adaptor") else None)
    for sub in (model_dir, tokenizer_dir, adapter_dir):  # before anything is read from them
        if sub is not None:
            check_model_files(sub, root=folder, source=uri, trust_remote_code=trust_remote_code,
                              weights=sub != tokenizer_dir)
    refuse_quantized(model_dir, source=uri)
    if trust_remote_code and adapter_dir is None:
        import mlflow

        components = mlflow.transformers.load_model(folder, return_type="components")
        if "tokenizer" not in components:
            raise ValueError(_NO_TOKENIZER.format(uri=uri))
        return Parts(components["model"], components["tokenizer"])
    model_cls = _transformers_class(flavor.get("pipeline_model_type"), "model", uri)
    tokenizer_cls = _transformers_class(flavor.get("tokenizer_type"), "tokenizer", uri)
    for sub in (model_dir, tokenizer_dir, adapter_dir):
        if sub is not None:
            refuse_remote_code(sub, source=uri)
    if adapter_dir is not None:
        adapter_config(adapter_dir, source=uri)
    try:
        with keys_checked_after_load(adapter_dir is not None):
            model, info = model_cls.from_pretrained(model_dir, trust_remote_code=False, use_safetensors=True,
                                                    output_loading_info=True, **load_kwargs(),
                                                    **({"key_mapping": BASE_KEY_MAPPING} if adapter_dir else {}))
        tokenizer = tokenizer_cls.from_pretrained(tokenizer_dir, trust_remote_code=False)
    except OSError as exc:  # transformers' word for a missing or unreadable file
        raise ValueError(f"{uri}: the model or its tokenizer cannot be loaded from the artifact ({exc})") from None
    if adapter_dir is not None:
        other = sorted(k for k in info.get("unexpected_keys", ()) if not _is_lora_key(k))
        if other:  # what the silenced report would have shown beyond the adapter's own keys
            log.warning("%s: the base model's weights hold %d key(s) it does not use (first %s)", uri, len(other),
                        other[:3])
    refuse_missing_weights(info, uri)
    if adapter_dir is None or base_only:
        return Parts(model, tokenizer)
    base = functools.partial(load_components, uri, trust_remote_code=trust_remote_code, base_only=True)
    return Parts(attach(model, adapter_dir, source=uri), tokenizer, base)


def _is_lora_key(key: str) -> bool:
    """A PEFT LoRA weight (``...lora_A...``, ``lora_B``, ``lora_embedding_*``, ``lora_magnitude_vector``)."""
    return ".lora_" in key or key.startswith("lora_")


class _DropLoadReport(logging.Filter):
    """Drops transformers' load report (its table of ``UNEXPECTED`` / ``MISSING`` keys)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "UNEXPECTED" not in record.getMessage() and "MISSING" not in record.getMessage()


class keys_checked_after_load:
    """While a model loads whose missing or unused keys the caller checks itself, transformers' load report
    (a table nobody can act on) is dropped.

    Used where keys are expected: a base loaded out of a PEFT artifact (the adapter's LoRA weights are unused
    until it is attached: :func:`load_components` warns of any that is not LoRA's) and the NER demo's tagger
    built on a pretrained encoder (its new ``classifier.*`` head, checked by the demo). ``active=False`` does
    nothing.
    """

    def __init__(self, active: bool = True):
        self.active, self.filter = active, _DropLoadReport()

    def __enter__(self):
        if self.active:
            logging.getLogger("transformers.modeling_utils").addFilter(self.filter)

    def __exit__(self, *exc) -> None:
        logging.getLogger("transformers.modeling_utils").removeFilter(self.filter)


_NO_TOKENIZER = ("{uri} was saved without a tokenizer; log the model with "
                 "transformers_model={{'model': model, 'tokenizer': tokenizer}}")


def logged_model_id(uri: str) -> tuple[str | None, str | None]:
    """``(model_id, run_id)`` from the MLmodel file of ``uri`` (None when unknown)."""
    try:
        from mlflow.models import get_model_info

        info = get_model_info(uri)
        return getattr(info, "model_id", None), getattr(info, "run_id", None)
    except Exception as exc:  # noqa: BLE001 - identity is best effort; weights digest is the fallback
        log.debug("no MLmodel info for %s: %s", uri, exc)
        return None, None
