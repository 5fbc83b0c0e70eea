"""PEFT adapters (LoRA and the other adapter kinds of ``peft``): a base model plus a small set of trained weights.

A reviewer meets an adapter in three forms, all loaded here with ``peft`` itself:

- a **registered MLflow transformers model** logged from a ``PeftModel``: MLflow writes the base
  weights under ``model/`` with PEFT's wrapped names (``c_attn.base_layer.weight``,
  ``c_attn.lora_A.default.weight``) and the adapter under the flavor's ``peft_adaptor`` folder.
  Loading ``model/`` with the plain class leaves every adapted layer MISSING and initialised at
  random; :func:`load_base` maps the names back (``key_mapping``) and refuses any weight still
  missing;
- a **local adapter folder** (``adapter_config.json`` and ``adapter_model.safetensors``) with its
  base: a local folder or a ``models:/`` URI, from the ``base_model`` option or the adapter's
  ``base_model_name_or_path`` (no hub at audit time);
- an in-memory ``PeftModel`` (used as it is).

The adapter is merged into the base when that is exact up to float rounding (LoRA and its
variants without dropout at inference; :func:`attach`), so the audit runs a plain model at the
base's speed; :data:`MERGE_TOLERANCE` states how close the merged model's logits stay to the
unmerged ``PeftModel``'s (measured by ``tests/models/test_adapters.py``).
"""

from __future__ import annotations

import json
import logging
import os

from mlflow_mia.signals.placement import is_dispatched

__all__: list[str] = []

log = logging.getLogger(__name__)

ADAPTER_CONFIG = "adapter_config.json"
#: PEFT's wrapped layer names back to the base model's (``...c_attn.base_layer.weight`` -> ``...c_attn.weight``).
BASE_KEY_MAPPING = {r"\.base_layer\.": "."}
#: Largest absolute difference of float32 logits between a merged LoRA model and its unmerged ``PeftModel``
#: accepted by the tests, relative to the largest logit (merging adds B @ A into W once instead of per call).
MERGE_TOLERANCE = 1e-5
#: Adapter task types a language-model audit can use (``None``: not stated, the model's head decides).
LM_TASKS = (None, "CAUSAL_LM", "SEQ_2_SEQ_LM", "TOKEN_CLS", "FEATURE_EXTRACTION")
_ADAPTER_PARTS = (".lora_", ".lora_magnitude_vector", ".ia3_l", ".oft_", ".boft_", ".hada_", ".lokr_", ".vera_")


def is_adapter_key(key: str) -> bool:
    """Whether ``key`` is an adapter weight saved beside the base weights (``...lora_A.default.weight``)."""
    return any(part in key for part in _ADAPTER_PARTS)


def is_adapter_folder(path: str) -> bool:
    """A folder holding a PEFT adapter (``adapter_config.json``) and no full model (``config.json``)."""
    return os.path.isfile(os.path.join(path, ADAPTER_CONFIG)) and not os.path.isfile(os.path.join(path, "config.json"))


def adapter_config(folder: str, *, source: str, task: str = "language model") -> dict:
    """The adapter's ``adapter_config.json``, checked for a task the audit can use.

    Raises
    ------
    ValueError
        The file is missing or unreadable, or the adapter is for another task (a
        sequence classifier: its head is not a language model's).
    """
    path = os.path.join(folder, ADAPTER_CONFIG)
    try:
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{source}: the PEFT adapter's {ADAPTER_CONFIG} cannot be read ({exc})") from None
    kind = config.get("task_type")
    allowed = ("TOKEN_CLS", None) if task == "token classifier" else LM_TASKS
    if kind not in allowed:
        raise ValueError(f"{source} is a PEFT adapter for task {kind!r}; a {task} audit needs "
                         f"{' or '.join(str(t) for t in allowed if t)} (an adapter trained with another head "
                         "cannot be audited for membership of its training texts by these signals)")
    return config


def adapter_base(config: dict, *, source: str, base_model: str | None = None) -> str:
    """Where the adapter's base model is: ``base_model`` when given, else the adapter's own record of it.

    Raises
    ------
    ValueError
        No base can be found without the network (a hub id in ``base_model_name_or_path``
        and no ``base_model`` option), naming the base and the option.
    """
    if base_model:
        return base_model
    recorded = config.get("base_model_name_or_path")
    if recorded and (os.path.isdir(recorded) or str(recorded).startswith(("models:/", "runs:/"))):
        return recorded
    raise ValueError(f"{source} is a PEFT adapter whose base model ({recorded or 'not recorded'}) is not a local "
                     "folder or an MLflow model URI, and nothing is downloaded at audit time: name the base with "
                     "--base-model <folder or models:/name/version> (evaluator key base_model, MLproject -P "
                     "base_model=...)")


def attach(base, folder: str, *, source: str, merge: bool = True):
    """``base`` with the adapter in ``folder`` applied (merged into its weights when ``merge``).

    The adapter's weights must fit the base: an adapter of another architecture or
    vocabulary fails here, named.

    Raises
    ------
    ValueError
        The adapter does not fit the base model, or the base was placed by accelerate's ``device_map``.
    """
    from peft import PeftModel  # peft imports transformers: not on mlflow-mia --help's start-up path

    if is_dispatched(base):  # offloaded weights sit on the meta device; peft cannot wrap or merge them there
        raise ValueError(f"{source}: a PEFT adapter cannot be applied to a base spread by --device-map (its offloaded "
                         "weights are not in memory); merge the adapter first (peft's merge_and_unload(), then "
                         "save_pretrained) and audit the merged folder with --device-map auto")
    try:
        model = PeftModel.from_pretrained(base, folder, is_trainable=False)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise ValueError(f"{source}: the PEFT adapter does not fit its base model {type(base).__name__} ({exc}); "
                         "give the base the adapter was trained on (--base-model)") from None
    _refuse_unloaded(model, source)
    if merge and _mergeable(model):
        model = model.merge_and_unload()
    return model.eval()


def _refuse_unloaded(model, source: str) -> None:
    """An adapter whose target modules match nothing in the base loads without effect: refuse it."""
    if not any(hasattr(m, "base_layer") for _, m in model.named_modules()):
        raise ValueError(f"{source}: the PEFT adapter's target modules match no layer of the base model "
                         f"{type(model.get_base_model()).__name__}; give the base the adapter was trained on")


def _mergeable(model) -> bool:
    """Merging is exact (up to rounding) for additive adapters; kept unmerged otherwise."""
    config = model.peft_config.get(model.active_adapter)
    kind = str(getattr(config, "peft_type", "")).rsplit(".", 1)[-1]
    return kind in ("LORA", "IA3", "LOHA", "LOKR", "OFT", "BOFT", "VERA", "ADALORA")
