"""Log a trained model with the transformers flavor and register it under an alias.

One helper for every model the demos and ``mlflow-mia analyze`` train: the BBC News
masked LMs, the analysis variants and the WNUT-16 taggers. Explicit pip requirements
(MLflow's inference would pin torchvision) and a local model card (which also stops
MLflow from asking the Hugging Face hub for one).
"""

from __future__ import annotations

import contextlib
import torch

__all__ = ["register_model"]


def pip_requirements(*, peft: bool = False) -> list[str]:
    """Pinned requirements of the logged models: mlflow, torch, transformers, tokenizers (and peft for an adapter)."""
    import mlflow
    import tokenizers
    import transformers

    out = [
        f"mlflow=={mlflow.__version__}",
        f"torch=={torch.__version__.split('+')[0]}",
        f"transformers=={transformers.__version__}",
        f"tokenizers=={tokenizers.__version__}",
    ]
    if peft:
        import peft as peft_module  # it imports transformers: kept off mlflow-mia --help's start-up path

        out.append(f"peft=={peft_module.__version__}")
    return out


def register_model(model, tokenizer, *, name: str, alias: str, task: str = "fill-mask",
                   artifact_name: str | None = None, tags: dict | None = None, model_card=None, metadata: dict | None = None, client=None) -> str:
    """Log ``(model, tokenizer)`` to the active run, register it as ``name`` and point ``alias`` at it.

    Parameters
    ----------
    model, tokenizer : transformers objects
    name : str
        Registered model name.
    alias : str
        Alias set on the new version (e.g. ``"candidate"``).
    task : str
        transformers pipeline task of the flavor (``"fill-mask"``, ``"token-classification"``).
    artifact_name : str, optional
        Name of the logged model in the run; default ``name``.
    tags : dict, optional
        Version tags (numbers, names and digests only: never training text).
    model_card : huggingface_hub.ModelCard, optional
    metadata : dict, optional

    Returns
    -------
    str
        The new version's version-pinned URI, ``models:/<name>/<version>``.

    Raises
    ------
    mlflow.exceptions.MlflowException
        No active run, or the registry rejects the name.
    """
    import mlflow
    from mlflow import MlflowClient

    client = client or MlflowClient()
    info = mlflow.transformers.log_model(
        transformers_model={"model": model, "tokenizer": tokenizer}, name=artifact_name or name, task=task,
        registered_model_name=name, pip_requirements=pip_requirements(peft=hasattr(model, "peft_config")), model_card=model_card, metadata=metadata)
    version = info.registered_model_version
    client.set_registered_model_alias(name, alias, version)
    for key, value in (tags or {}).items():
        client.set_model_version_tag(name, version, key, str(value))
    return f"models:/{name}/{version}"


def tagged_version(client, name: str, alias: str, tag: str, value: str):
    """The version behind ``name@alias`` when its version tag ``tag`` is ``value``, else None.

    How a build finds a model it registered before from the same inputs (e.g. a shadow
    reference's key, a digest of its data and settings) and skips training it again.

    Parameters
    ----------
    client : mlflow.MlflowClient
    name, alias : str
        Registered model name and alias.
    tag, value : str
        The version tag and the value it must hold.

    Returns
    -------
    mlflow.entities.model_registry.ModelVersion or None
        None when the alias does not exist (or the registry rejects the lookup) or the tag differs.
    """
    from mlflow.exceptions import MlflowException

    try:
        version = client.get_model_version_by_alias(name, alias)
    except MlflowException:
        return None
    return version if (version.tags or {}).get(tag) == value else None


@contextlib.contextmanager
def torch_threads(num_threads: int | None):
    """Set torch's intra-op thread count inside the block and restore it after (``None``: leave it)."""
    if num_threads is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
