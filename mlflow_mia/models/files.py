"""Which files an audit may read from a model artifact, and which errors are environment faults.

A model's files are written by its authors, whom an audit does not trust
(``docs/explanations/security.md``). The loaders of :mod:`mlflow_mia.models.resolve` read
weights, ``config.json`` and tokenizer files only from inside the artifact or
folder being audited, so the weights whose digest becomes the model's identity
(and whose registry version gets the verdict) are that artifact's own:

- ``model_binary`` in ``MLmodel`` must be a relative path without ``..``;
- the model and tokenizer folders must not be symbolic links, and no link inside
  them may resolve outside the artifact;
- weights must be safetensors: a pickle (``pytorch_model.bin``) runs code when
  unpickled, so it needs ``trust_remote_code``;
- an empty folder, or a model folder without weights, is refused by name before a
  loader reports it as a bare ``OSError``.
"""

from __future__ import annotations

import difflib
import json
import os

__all__ = ["tracking_unreachable"]


#: Weight files in Python's pickle format: loading one can run code, so only safetensors are read by default.
PICKLE_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


def _within(path: str, root: str) -> bool:
    """True when ``path`` (symlinks resolved) is ``root`` or lies below it."""
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def inside_folder(root: str, relative: str, *, what: str, source: str) -> str:
    """``root/relative``, refused unless it stays inside ``root``: no absolute or ``..`` path, no symlink.

    Raises
    ------
    ValueError
        ``relative`` is absolute, climbs out with ``..``, is a symbolic link, or
        resolves outside ``root``; the message names ``what`` and the fix.
    """
    parts = relative.replace("\\", "/").split("/")
    if os.path.isabs(relative) or ".." in parts:
        raise ValueError(f"{source}: the {what} path {relative!r} points outside the model's folder; mlflow-mia "
                         "reads model files only from inside the artifact it audits (re-log the model with "
                         "mlflow.transformers.log_model)")
    path = os.path.join(root, relative)
    if os.path.islink(path):
        raise ValueError(f"{source}: the {what} folder {relative!r} is a symbolic link (to "
                         f"{os.readlink(path)!r}); mlflow-mia reads model files only from inside the artifact it "
                         "audits: copy the real files into it (cp -rL) or re-log the model")
    if not _within(path, root):
        raise ValueError(f"{source}: the {what} path {relative!r} resolves outside the model's folder; mlflow-mia "
                         "reads model files only from inside the artifact it audits")
    return path


def check_model_files(folder: str, *, root: str | None = None, source: str | None = None,
                      trust_remote_code: bool = False, weights: bool = True) -> None:
    """Refuse a model folder whose files leave ``root`` or whose weights are pickles.

    Called before anything is loaded, so the weights the audit reads (and whose
    digest becomes the model's identity) are files of the audited artifact itself.

    Parameters
    ----------
    folder : str
        A Hugging Face folder (weights, ``config.json``, tokenizer files).
    root : str, optional
        The artifact it belongs to (default: ``folder``); no file may resolve outside it.
    source : str, optional
        The model reference named in messages.
    trust_remote_code : bool
        Also accept pickle weights (``pytorch_model.bin``) when no safetensors file
        is there: unpickling runs code, so this needs the same trust as shipped code.
    weights : bool
        Check the weight format (False for a tokenizer folder).

    Raises
    ------
    ValueError
        A symbolic link inside ``folder`` resolves outside ``root``; the folder holds no
        file (a symbolic link that was uploaded as an empty folder) or, for a model
        folder, no weights file; or the folder's weights are pickle files only and
        ``trust_remote_code`` is off. Each message names ``source`` and the folder.
    """
    root, source = root or folder, source or folder
    safe, pickles, found = [], [], []
    for here, dirs, files in os.walk(folder):
        found += files
        for entry in dirs + files:
            path = os.path.join(here, entry)
            if os.path.islink(path) and not _within(path, root):
                raise ValueError(f"{source}: {os.path.relpath(path, root)!r} is a symbolic link to "
                                 f"{os.readlink(path)!r}, outside the model's folder; mlflow-mia reads model files "
                                 "only from inside the artifact it audits: copy the real files into it (cp -rL)")
        safe += [f for f in files if f.endswith(".safetensors")]
        pickles += [f for f in files if f.endswith(PICKLE_WEIGHTS) and not f.startswith("training_args")]
    where = os.path.relpath(folder, root) if folder != root else "."
    if not found:
        raise ValueError(f"{source}: the {'model' if weights else 'tokenizer'} folder {where!r} is empty (a symbolic "
                         "link uploaded as an empty folder, or an interrupted copy?); log the model again with its "
                         "files (mlflow.transformers.log_model)")
    if weights and not safe and not pickles:
        raise ValueError(f"{source}: the model folder {where!r} holds no weights file (.safetensors); log the model "
                         "again with its weights (mlflow.transformers.log_model, or save_pretrained)")
    if weights and pickles and not safe and not trust_remote_code:
        raise ValueError(f"{source}: the weights are pickle files ({', '.join(sorted(pickles)[:3])}), and loading a "
                         "pickle can run code of the model's authors; mlflow-mia reads safetensors weights only. "
                         "Re-save the model with save_pretrained (safetensors is the default) or, if you trust its "
                         "authors, pass --trust-remote-code (evaluator key trust_remote_code=True)")


def tracking_unreachable(exc: BaseException) -> bool:
    """True when ``exc`` (or what it was raised from) says the tracking server could not be reached.

    MLflow's REST client turns a refused connection or a timeout into an
    ``MlflowException("API request to ... failed with exception ...")``; that is an
    environment fault (the server is down), not a wrong model URI or bad input.
    """
    import requests

    seen = exc
    while seen is not None:
        if isinstance(seen, (requests.exceptions.ConnectionError, requests.exceptions.Timeout, ConnectionError)):
            return True
        seen = seen.__cause__ or seen.__context__
    message = str(getattr(exc, "message", exc))
    return "API request to " in message and ("failed with exception" in message
                                             or "failed with timeout exception" in message)


def unresolved_uri_error(client, uri: str, name: str, message: str) -> ValueError:
    """The error for a ``models:/`` URI the registry could not resolve: what, where, and the fix.

    ``cannot resolve '<uri>' in the model registry at <tracking URI>: <MLflow's message>``,
    then, when no model is registered as ``name`` (a misspelt name), the registered names
    like it ("did you mean ...?") and the command that lists them all
    (:func:`registered_names_like`).

    Parameters
    ----------
    client : mlflow.MlflowClient
    uri : str
        The URI as given (``models:/name@alias``, ``models:/name/3``).
    name : str
        The registered model name in it.
    message : str
        MLflow's own message.
    """
    import mlflow

    tracking_uri = mlflow.get_tracking_uri()
    return ValueError(f"cannot resolve {uri!r} in the model registry at {tracking_uri}: {message}"
                      + registered_names_like(client, name, tracking_uri=tracking_uri))


def registered_names_like(client, name: str, *, tracking_uri: str) -> str:
    """For a registered model ``name`` that does not exist: the registered names like it and how to list them all.

    Close matches by :func:`difflib.get_close_matches` (ratio >= 0.6) and names that contain
    ``name`` or are contained in it (case-insensitive), at most five; ``""`` when the model
    exists (the alias or version was what did not resolve) or the registry cannot be listed.

    >>> import types
    >>> fake = types.SimpleNamespace(get_registered_model=lambda n: (_ for _ in ()).throw(KeyError(n)),
    ...                              search_registered_models=lambda **kw: [types.SimpleNamespace(name=n) for n in
    ...                                  ("bbc-small-target", "bbc-small-reference", "other")])
    >>> registered_names_like(fake, "bbc-smal-target", tracking_uri="sqlite:///mlflow.db").split("; list")[0]
    "; did you mean 'bbc-small-target' or 'bbc-small-reference'?"
    """
    try:
        client.get_registered_model(name)
        return ""  # the model exists: its alias, version or stage is what is missing
    except Exception:  # noqa: BLE001 - any lookup failure: go on and list the names
        pass
    try:
        names = [m.name for m in client.search_registered_models(max_results=1000)]
    except Exception:  # noqa: BLE001 - a registry that cannot be listed gets the plain message
        return ""
    lower = name.lower()
    close = difflib.get_close_matches(name, names, n=5, cutoff=0.6)
    close += [n for n in names if n not in close and (lower in n.lower() or n.lower() in lower)]
    listing = (f"; list them all with: python -c \"import mlflow; mlflow.set_tracking_uri('{tracking_uri}'); "
               "print([m.name for m in mlflow.search_registered_models()])\"")
    if not close:
        return f"; no registered model has a name like {name!r}" + listing
    shown = [repr(n) for n in close[:5]]
    return "; did you mean " + (" or ".join(shown) if len(shown) <= 2 else ", ".join(shown[:-1]) + " or "
                                + shown[-1]) + "?" + listing


def refuse_quantized(folder: str, *, source: str | None = None) -> None:
    """Refuse a checkpoint saved quantized (bitsandbytes, GPTQ, AWQ, ...), before it is loaded.

    Its ``config.json`` carries a ``quantization_config``: loading it needs the quantization
    library and (for most methods) a GPU, and an audit of it measures the quantized weights,
    not the model that was trained. The fix is named: dequantize and save the model first.

    Raises
    ------
    ValueError
        Naming the method and the fix.
    """
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        return
    try:
        with open(path, encoding="utf-8") as fh:
            quant = json.load(fh).get("quantization_config")
    except (OSError, ValueError):
        return  # transformers names an unreadable config when it loads it
    if quant:
        method = quant.get("quant_method") or ("bitsandbytes" if "load_in_4bit" in quant or "load_in_8bit" in quant
                                                else "unknown")
        raise ValueError(f"{source or folder} is a quantized checkpoint ({method}); mlflow-mia audits unquantized "
                         "weights (an audit of the quantized model would not measure the model that was trained). "
                         "Dequantize first: load it with its library, call model.dequantize() (transformers) and "
                         "save_pretrained the result, then audit that folder or log it with "
                         "mlflow.transformers.log_model")

