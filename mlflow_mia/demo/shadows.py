"""Shadow models trained with the target's recipe on random halves of a candidate set (online LiRA's shadows).

Carlini et al. (2022), "Membership Inference Attacks From First Principles", Sec. IV:
the online attack trains k shadow models *like the target* (same base, data size,
epochs and recipe) on random halves of a candidate set that holds the audited texts,
so that each text has shadows that trained on it (IN) and shadows that did not (OUT).
This module does that for masked LMs:

- :class:`ShadowRecipe`: the target's recipe (base model, :class:`~mlflow_mia.demo.train.TrainConfig`,
  optional DP-SGD :class:`~mlflow_mia.demo.dp.DPConfig`), read from and written to a JSON file.
- :func:`balanced_halves`: the LiRA design; with k even every candidate is IN for
  exactly k / 2 shadows (each unit's IN shadows are a seeded random k / 2 of them).
- :func:`train_shadows`: trains, logs (one MLflow run per shadow, the recipe as params)
  and registers shadows ``<name>-0 .. <name>-<k-1>`` under the alias ``champion``, each
  version tagged with a key of (recipe, base weights, candidate digest, k, seed, index);
  a second call skips every shadow registered with its key, so a build that was killed
  resumes with the missing shadows only.
- :class:`ShadowRecord`: which candidate texts each shadow trained on, as keyed hashes
  (``HMAC-SHA256(key, sha256(text))``, :func:`mlflow_mia.hashing.keyed_hash`): never the
  texts. :func:`shadow_membership` turns it into the ``shadow_membership`` input of
  ``lira_online`` for an audit's texts. These four, which need no model, live in
  :mod:`mlflow_mia.demo.shadow_record` and are re-exported here.
- :func:`with_shadow_membership` adds that input to an audit's signals, and
  :func:`audit_with_shadows` runs a membership audit with the shadows as the reference
  set and ``lira_online`` among the attacks; :func:`demo_recipe` is the demo target's recipe.

A command line builds on :func:`train_shadows` (recipe from ``ShadowRecipe.from_json``,
key from :func:`mlflow_mia.hashing.resolve_hash_key`) and :func:`audit_with_shadows`.

Each shadow's run holds ``shadow_training.json`` (its IN texts' keyed hashes, sorted) and
``shadow_recipe.json``; the whole record goes to ``record_path`` when given.
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
from huggingface_hub import ModelCard
from mlflow import MlflowClient
import mlflow

from mlflow_mia.config import record_digest
from mlflow_mia.data import text_hash
from mlflow_mia.demo.registry import register_model, tagged_version, torch_threads
from mlflow_mia.demo.shadow_inputs import (SHADOW_NAME_PATTERN, check_record_path, check_shadow_name,  # noqa: F401
                                           refuse_other_sets)  # SHADOW_NAME_PATTERN, check_shadow_name re-exported
from mlflow_mia.demo.shadow_record import (ShadowRecipe, ShadowRecord, balanced_halves,  # noqa: F401  (re-exported)
                                           shadow_membership)
from mlflow_mia.demo.train import TrainConfig
from mlflow_mia.hashing import HashKey, keyed_hash, resolve_hash_key
from mlflow_mia.naming import DEFAULT_EXPERIMENT
from mlflow_mia.attacks import gate_attacks, required_inputs
from mlflow_mia.audits.membership import compute_audit_signals, score_audit
from mlflow_mia.config import AuditConfig
from mlflow_mia.demo.build import DEMO_SIZES, demo_spec
from mlflow_mia.demo.dp import train_mlm_dp
from mlflow_mia.demo.train import train_mlm
from mlflow_mia.audits.membership.signals import AuditSignals
from mlflow_mia.audits.membership.models import AuditModels
from mlflow_mia.models.resolve import resolve_model
from mlflow_mia.demo.shadow_binding import check_signals_record, pool_digests, shadow_weights
from mlflow_mia.pipeline.membership import shadow_record_entry

__all__ = ["ShadowRecipe", "check_shadow_name", "train_shadows", "demo_recipe"]

logger = logging.getLogger(__name__)

SHADOW_ALIAS = "champion"
SHADOW_KEY_TAG = "mlflow_mia.shadow_key"


@dataclass(frozen=True)
class ShadowSet:
    """What :func:`train_shadows` returns.

    Attributes
    ----------
    record : ShadowRecord
    uris : tuple of str
        The shadows' version-pinned URIs, in order: give them as the audit's references.
    trained : tuple of int
        Indices trained by this call (the others were registered already).
    run_ids : tuple of str
        The MLflow runs of the shadows trained by this call.
    """

    record: ShadowRecord
    uris: tuple
    trained: tuple
    run_ids: tuple = ()


def _as_key(key) -> HashKey:
    key = resolve_hash_key() if key is None else key
    if not isinstance(key, HashKey):
        key = HashKey.from_bytes(key, source="argument")
    if key.is_random:
        raise ValueError("the shadows' training record is written under your hash key, and a random key would make "
                         "it unreadable: set MLFLOW_MIA_HASH_KEY or pass key=... (32+ bytes)")
    return key


def _candidates(texts, groups):
    texts = [str(t) for t in texts]
    if not texts:
        raise ValueError("train_shadows needs candidate texts (the pool, the population and other in-domain text)")
    hashes = [text_hash(t) for t in texts]
    if len(set(hashes)) != len(hashes):
        raise ValueError(f"{len(hashes) - len(set(hashes))} candidate texts are duplicates; drop them (a text must "
                         "be IN or OUT of a shadow, not both)")
    if groups is None:
        return texts, hashes, np.arange(len(texts)), None
    groups = [str(g) for g in groups]
    if len(groups) != len(texts):
        raise ValueError(f"{len(groups)} groups for {len(texts)} candidate texts: give one group per text")
    _, unit = np.unique(np.array(groups), return_inverse=True)
    return texts, hashes, unit, groups


def _card(name: str, index: int, k: int, n_texts: int):
    return ModelCard("---\npipeline_tag: fill-mask\ntags:\n- mlflow-mia\n- shadow-model\n---\n"
                     f"# {name}\n\nShadow model {index} of {k} of an mlflow-mia audit: the target's base and "
                     f"recipe, trained on a random half ({n_texts} texts) of the audit's candidate texts. It exists "
                     "to attack the audited target (online LiRA) and is not meant for any other use.\n")


def train_shadows(candidates: Sequence[str], *, recipe: ShadowRecipe, count: int, name: str, groups=None,
                  seed: int = 0, key=None, record_path=None, pools=(), experiment: str = DEFAULT_EXPERIMENT,
                  force: bool = False, replace_others: bool = False, progress: bool = True,
                  num_threads: int | None = None, trainer=None) -> ShadowSet:
    """Train and register k shadow models with the target's recipe on balanced random halves of ``candidates``.

    Parameters
    ----------
    candidates : sequence of str
        The candidate texts: the audit's pool and population (every text online LiRA
        scores must be here), plus optional other in-domain text. No duplicates.
    recipe : ShadowRecipe
        The target's recipe. Give ``train.steps`` (or epochs) so that a shadow trains on
        as much data as long as the target did (LiRA's assumption): with halves of the
        candidates, a shadow sees about ``len(candidates) / 2`` texts.
    count : int
        k, the number of shadow models (even for the balanced design; >= 4 for lira_online).
    name : str
        Registered names ``<name>-0`` ... ``<name>-<k-1>`` (:func:`check_shadow_name`).
    groups : sequence, optional
        One group id per text (e.g. the article): the halves are drawn per group, so a
        shadow trains on all or none of a group's texts (the audit's membership unit).
    seed : int
        Seed of the halves.
    key : HashKey, bytes or str, optional
        The hash key of the record (default ``$MLFLOW_MIA_HASH_KEY``); a random key is refused.
    record_path : path-like, optional
        Where to write the :class:`ShadowRecord` JSON (read it back with :meth:`ShadowRecord.from_json`).
        Checked before any training: its folder must exist and be writable, and an existing
        file is replaced only when it is this set's record (same candidates, recipe, count,
        seed and key: a resumed or repeated build) or with ``replace_others``.
    pools : sequence of AuditDataset
        The audited pool(s), each text a candidate: the record is bound to their keyed digests and to
        the shadows' weights digests (:mod:`mlflow_mia.demo.shadow_binding`); an audit with other
        shadows or another pool refuses it.
    experiment : str
        MLflow experiment of the shadows' runs (created when missing).
    force : bool
        Train every shadow even when one is registered with its key.
    replace_others : bool
        Move ``champion`` off shadows of another set registered under the same names
        (another recipe, candidates, count, seed or base: perhaps another user's), and
        replace a ``record_path`` file that is not this set's record. Without it both are
        refused before any training (the command: ``--force``).
    progress : bool
    num_threads : int, optional
        Torch CPU threads while training.
    trainer : callable, optional
        ``trainer(model, tokenizer, texts, train_config, recipe, desc) -> (TrainResult, dict of metrics)``;
        default: :func:`~mlflow_mia.demo.train.train_mlm`, or
        :func:`~mlflow_mia.demo.dp.train_mlm_dp` when ``recipe.dp`` is set.

    Returns
    -------
    ShadowSet

    Raises
    ------
    ValueError
        No or duplicate candidates, groups of another length, a bad ``count`` or ``name``, no
        kept hash key; without ``replace_others``: a name whose ``champion`` holds a shadow of
        another set, a ``record_path`` that is not this set's record. All before any training.

    Notes
    -----
    A shadow is skipped when ``<name>-<j>@champion`` carries the tag
    ``mlflow_mia.shadow_key`` = digest of (recipe, base weights, candidate digest, k, seed,
    j): after an interruption the next call trains only the shadows not yet registered.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive int (the number of shadow models), got {count!r}")
    check_shadow_name(name)
    key = _as_key(key)
    texts, hashes, unit, groups = _candidates(candidates, groups)
    candidate_digest = record_digest({"texts": hashes, "groups": groups})
    bound = pool_digests(pools, hashes, key)  # no pool, or a pool text that is not a candidate: before training
    if record_path is not None:  # a missing folder or someone else's file fails now, not after training
        check_record_path(record_path, {"candidate_digest": candidate_digest, "recipe": recipe.to_dict(),
                                         "seed": int(seed), "key_check": key.check, "k": count},
                           replace=replace_others)
    member = balanced_halves(int(unit.max()) + 1, count, seed=seed)[:, unit]
    base = resolve_model(recipe.base_model, role="shadow base")
    set_key = record_digest({"recipe": recipe.digest, "base_weights": base.lm.weights_id,
                             "candidates": candidate_digest, "k": count, "seed": seed})
    client = MlflowClient()
    names = [f"{name}-{j}" for j in range(count)]
    keys = [record_digest({"set": set_key, "index": j}) for j in range(count)]
    if not replace_others:
        refuse_other_sets(client, names, keys, alias=SHADOW_ALIAS, tag=SHADOW_KEY_TAG)
    found = [None if force else tagged_version(client, n, SHADOW_ALIAS, SHADOW_KEY_TAG, kj)
             for n, kj in zip(names, keys)]
    hmacs = tuple(keyed_hash(h, key) for h in hashes)
    trainer = trainer or _default_trainer
    experiment_id = _experiment(client, experiment)
    uris, trained, run_ids = [], [], []
    for j, (shadow, kj, version) in enumerate(zip(names, keys, found)):
        if version is not None:
            uris.append(f"models:/{shadow}/{version.version}")
            continue
        half = [t for t, m in zip(texts, member[j]) if m]
        model = copy.deepcopy(base.lm.model)
        config = replace(recipe.train, seed=recipe.train.seed + 1 + j)
        project_run = os.environ.pop("MLFLOW_RUN_ID", None)  # under ``mlflow run``: never resume the project's run
        try:
            with mlflow.start_run(experiment_id=experiment_id, run_name=shadow,
                                  nested=mlflow.active_run() is not None) as run, torch_threads(num_threads):
                mlflow.log_params({**recipe.params(), "shadow.index": j, "shadow.count": count,
                                   "shadow.seed": seed, "shadow.train_seed": config.seed,
                                   "shadow.candidates": len(texts), "shadow.trained_texts": len(half),
                                   "shadow.candidate_digest": candidate_digest, "shadow.key_check": key.check,
                                   "shadow.half_unit": "group" if groups is not None else "text"})
                result, metrics = trainer(model, base.lm.tokenizer, half, config, recipe,
                                          f"shadow {j + 1}/{count}" if progress else None)
                mlflow.log_params(result.to_params("shadow.train"))
                for epoch, loss in enumerate(result.epoch_losses, start=1):
                    mlflow.log_metric("train_loss", loss, step=epoch)
                if metrics:
                    mlflow.log_metrics(metrics)
                mlflow.log_dict(recipe.to_dict(), "shadow_recipe.json")
                mlflow.log_dict({"index": j, "key_check": key.check, "candidate_digest": candidate_digest,
                                 "n_candidates": len(texts),
                                 "trained_on": sorted(h for h, m in zip(hmacs, member[j]) if m)},
                                "shadow_training.json")
                uri = register_model(model, base.lm.tokenizer, name=shadow, alias=SHADOW_ALIAS, artifact_name="shadow",
                                     tags={SHADOW_KEY_TAG: kj, "mlflow_mia.shadow_index": j,
                                           "mlflow_mia.shadow_candidate_digest": candidate_digest},
                                     client=client, model_card=_card(shadow, j, count, len(half)),
                                     metadata={"mlflow_mia_role": "shadow"})
        finally:
            if project_run is not None:
                os.environ["MLFLOW_RUN_ID"] = project_run
        logger.info("registered %s (shadow %d of %d)", uri, j + 1, count)
        uris.append(uri)
        trained.append(j)
        run_ids.append(run.info.run_id)
    record = ShadowRecord(hmacs, member, key.check, candidate_digest, recipe.to_dict(), int(seed), tuple(uris),
                          weights=shadow_weights(uris, client=client), pools=bound)
    if record_path is not None:
        record.to_json(record_path)
    return ShadowSet(record=record, uris=tuple(uris), trained=tuple(trained), run_ids=tuple(run_ids))


def _experiment(client, name: str) -> str:
    experiment = client.get_experiment_by_name(name)
    return experiment.experiment_id if experiment is not None else client.create_experiment(name)


def _default_trainer(model, tokenizer, texts, config: TrainConfig, recipe: ShadowRecipe, desc):
    """:func:`train_mlm`, or :func:`train_mlm_dp` with ``recipe.dp``; returns (TrainResult, metrics)."""
    if recipe.dp is None:
        return train_mlm(model, tokenizer, texts, config, progress=desc is not None, desc=desc or "shadow"), {}

    result = train_mlm_dp(model, tokenizer, texts, config, recipe.dp, progress=desc is not None,
                          desc=desc or "shadow")
    return result.train, result.metrics()




def with_shadow_membership(signals, record, key, *, pool, population):
    """``signals`` plus the ``shadow_membership`` input of ``lira_online``, read from the shadows' record.

    The audit's references must be the record's shadow models, in its order
    (``record.uris``), so that column j of the membership is reference j.

    Parameters
    ----------
    signals : AuditSignals
        Computed with the shadows as references (e.g. ``compute_audit_signals``).
    record : ShadowRecord or path-like
    key : HashKey, bytes or str
        The key the record was written under.
    pool, population : AuditDataset, PopulationSet
        The audit's data: the rows are the pool's texts, then the population's.

    Returns
    -------
    AuditSignals
        The same signals, text hashes, info and extras, with ``shadow_membership``.

    Raises
    ------
    ValueError
        Signals without the ``references`` input, with another number of references than
        the record has shadows, or (when the signals name their models) references that
        are not the record's shadows in its order; a key that is not the record's; references
        whose weights are not the record's shadows', or a pool it was not made for
        (:func:`~mlflow_mia.demo.shadow_binding.check_signals_record`).
    """
    if not isinstance(record, ShadowRecord):
        record = ShadowRecord.from_json(record)
    if "references" not in signals:
        raise ValueError("the signals have no 'references' input: compute them with the shadow models as the "
                         f"references ({', '.join(record.uris) or 'the record has no URIs'})")
    if signals["references"].k != record.k:
        raise ValueError(f"the signals have {signals['references'].k} reference models but the record has "
                         f"{record.k} shadows: give the record's shadows as the references, in its order")
    models = (signals.info or {}).get("models") or {}
    used = [models.get(role, {}).get("identity") for role in signals["references"].roles]
    if record.uris and all(used) and list(used) != list(record.uris):
        raise ValueError(f"the signals' reference models {used} are not the record's shadows {list(record.uris)} in "
                         "its order: column j of the membership must be reference j")
    member = shadow_membership(record, list(pool.texts) + list(population.texts), key)  # the key first
    check_signals_record(signals, record, key, pool=pool)  # then the record's shadows (weights) and pool
    return AuditSignals({**signals.signals, "shadow_membership": member}, text_hashes=signals.text_hashes,
                        info=signals.info, extras=signals.extras)


def audit_with_shadows(target, pool, population, *, record, key, config=None, cache=None, device=None,
                       progress: bool = True):
    """A membership audit whose references are the record's shadow models, with ``lira_online``.

    Stage 1 computes the signals with the shadows as the reference set (``record.uris``,
    in order) for the attacks of ``config`` other than ``lira_online``; the shadows'
    training record then gives the ``shadow_membership`` input
    (:func:`with_shadow_membership`), and stage 2 scores every attack of ``config``:
    ``lira_online``, and ``lira_offline`` and ``rmia`` on each text's OUT shadows.

    Parameters
    ----------
    target : str, MaskedLM or (model, tokenizer)
        The audited model: a model URI or folder (:func:`~mlflow_mia.models.resolve.resolve_model`) or a loaded one.
    pool, population : AuditDataset, PopulationSet
        Every text must be one of the shadows' candidates (else it has no IN shadow).
    record : ShadowRecord or path-like
    key : HashKey, bytes or str
        The key the record was written under.
    config : AuditConfig, optional
        Default: the gate's set with ``lira_online``
        (:func:`~mlflow_mia.attacks.gate_attacks` with ``shadow_membership=True``).
    cache, device, progress
        As for :func:`~mlflow_mia.audits.membership.run_audit`.

    Returns
    -------
    AuditResult
        ``models["shadow_record"]``: the record's digest, the pool's and the direction check
        (:func:`~mlflow_mia.pipeline.membership.shadow_record_entry`).

    Raises
    ------
    ValueError
        A record without shadow URIs, a key that is not the record's, and every error of the audit.
    """
    path = None if isinstance(record, ShadowRecord) else record
    if not isinstance(record, ShadowRecord):
        record = ShadowRecord.from_json(record)
    if not record.uris:
        raise ValueError("the shadow record names no shadow models (uris); write it with train_shadows")
    config = config or AuditConfig(attacks=gate_attacks(record.k, shadow_membership=True))
    first = tuple(a for a in config.attacks if a != "lira_online")
    if "references" not in required_inputs(first):
        first += ("lira_offline",)  # stage 1 then computes every shadow's signals
    stage_config = replace(config, attacks=first)

    def load(model, *, role):
        return resolve_model(model, role=role).lm  # model URIs, folders, loaded models

    models = AuditModels.build(target, references=list(record.uris), config=stage_config, load=load)
    signals = compute_audit_signals(models, pool, population, stage_config, cache=cache, device=device,
                                    progress=progress)
    signals = with_shadow_membership(signals, record, key, pool=pool, population=population)
    result = score_audit(signals, pool, population, config)
    entry = shadow_record_entry(record, path, pool=pool, key=key, result=result)
    return replace(result, models={**result.models, "shadow_record": entry})


def demo_recipe(size: str = "default") -> ShadowRecipe:
    """The BBC News demo target's recipe, for shadows trained like it.

    The target is the public base (``<prefix>base@champion``) fine-tuned with
    ``DEMO_SIZES[size].finetune`` for its epochs (15 on the default demo) over its
    training articles. The recipe keeps the epochs (not the target's step count), so a
    shadow makes as many passes over its half as the target over its articles; a
    shadow trains on as much data as the target when the candidate set holds twice the
    target's training texts (e.g. the pool and population articles, plus in-domain
    articles to make up the difference), halved per article (``groups``).

    Raises
    ------
    ValueError
        Unknown ``size``.
    """
    spec = demo_spec(size)
    return ShadowRecipe(base_model=spec.base_uri, train=DEMO_SIZES[size].finetune)
