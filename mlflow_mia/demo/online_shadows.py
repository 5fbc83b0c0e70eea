"""The BBC News demo's online shadows: k models trained with the target's recipe on random halves of its candidates.

:func:`build_demo_shadows` is what ``mlflow-mia audit --demo-shadows K`` (MLproject
``-P demo_shadows=K``) runs before it audits the demo target with online LiRA
(Carlini et al. 2022, Sec. IV): :func:`~mlflow_mia.demo.shadows.train_shadows` with the
target's recipe (:func:`~mlflow_mia.demo.shadows.demo_recipe`: its base, epochs, batch
size and learning rate) on balanced random halves, by article, of the demo's candidate
set: the audited pool, the population set, and whole in-domain reference articles
(``DemoSplit.reference_train``, in a seeded random order) until the set holds twice the
target's training sentences, so that a shadow trains on as many sentences as the target
did, for as many epochs (LiRA's assumption). Every audited text is a candidate, so each has
shadows that trained on it (IN) and shadows that did not (OUT). The shadows are registered as
``<prefix>online-shadow-0 .. <k-1>@champion`` with a keyed record of the texts each
trained on, written to ``<demo folder>/online-shadows-<k>.json``; a second call trains
only the shadows not yet registered.

The record is keyed with the audit's hash key (``--hash-key-file`` or
``$MLFLOW_MIA_HASH_KEY``); without one the demo keeps its own key in
``<demo folder>/shadow-hash.key`` (mode 600), and the audit reads the record with it.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mlflow_mia.data import AuditDataset
from mlflow_mia.demo import bbc
from mlflow_mia.demo.build import DEMO_SIZES, demo_spec
from mlflow_mia.demo.shadows import demo_recipe, train_shadows
from mlflow_mia.hashing import HashKey, resolve_hash_key

__all__ = ["build_demo_shadows"]


@dataclass(frozen=True)
class DemoShadows:
    """What :func:`build_demo_shadows` returns.

    Attributes
    ----------
    uris : tuple of str
        The shadows' version-pinned URIs, in the record's order: the audit's references.
    record_path : str
        The shadow record (:class:`~mlflow_mia.attacks.shadow_record.ShadowRecord` JSON).
    key_file : str or None
        The demo's own key file when no key was given, else None.
    trained : tuple of int
        Shadows trained by this call (the others were registered already).
    n_candidates, n_groups : int
        Candidate texts and articles.
    seconds : float
        Wall time of the call (training included).
    """

    uris: tuple
    record_path: str
    key_file: str | None
    trained: tuple
    n_candidates: int
    n_groups: int
    seconds: float


def demo_key_file(folder) -> str:
    """The demo's own hash key file in ``folder`` (32 random bytes, mode 600), created on first use."""
    path = Path(folder) / "shadow-hash.key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(32))
    return str(path)


def _make_up(reference, missing: int, *, seed: int):
    """Whole reference articles, in a seeded random order, until they hold ``missing`` sentences (or all of them)."""
    taken = bbc.whole_articles(reference, reference["article_id"].unique(), missing, [int(seed), 35])
    return reference.loc[reference["article_id"].astype(str).isin(set(taken)), ["text", "article_id"]]


def build_demo_shadows(count: int, *, size: str = "default", key: HashKey | None = None, data_dir=None,
                       progress: bool = True, num_threads: int | None = None, force: bool = False) -> DemoShadows:
    """Train (or find) ``count`` online shadows of the demo target and write their record.

    Parameters
    ----------
    count : int
        k, >= 4 (online LiRA needs two IN and two OUT shadows of each text; even for the
        balanced design).
    size : {"default", "small"}
    key : HashKey, optional
        The record's key. Default: ``$MLFLOW_MIA_HASH_KEY``, else the demo's key file
        (:func:`demo_key_file`); a random key is never used.
    data_dir : path-like, optional
        The demo's folder (default: the one :func:`~mlflow_mia.demo.build.build_demo` uses).
    progress, num_threads, force
        As for :func:`~mlflow_mia.demo.shadows.train_shadows`.

    Returns
    -------
    DemoShadows

    Raises
    ------
    ValueError
        ``count`` below 4 or odd, an unknown ``size``.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 4 or count % 2:
        raise ValueError(f"the demo's online shadows need an even count >= 4 (two IN and two OUT shadows of each "
                         f"text), got {count!r}: e.g. --demo-shadows 4")
    t0 = time.perf_counter()
    recipe = demo_recipe(size)  # unknown sizes fail here
    folder = Path(demo_spec(size, data_dir=data_dir).pool_path).parent
    key_file = None
    if key is None or key.is_random:
        key = resolve_hash_key()
        if key.is_random:
            key_file = demo_key_file(folder)
            key = resolve_hash_key(key_file)
    split = bbc.make_split(DEMO_SIZES[size].split)
    candidates = pd.concat([f[["text", "article_id"]] for f in (split.pool, split.population)], ignore_index=True)
    candidates = pd.concat([candidates, _make_up(split.reference_train, 2 * len(split.target_train) - len(candidates),
                                                 seed=split.config.seed)], ignore_index=True)
    candidates = candidates.drop_duplicates("text", keep="first")
    record_path = str(folder / f"online-shadows-{count}.json")
    built = train_shadows(candidates["text"].tolist(), recipe=recipe, count=count,
                          name=f"{DEMO_SIZES[size].prefix}online-shadow", groups=candidates["article_id"].astype(str),
                          key=key, record_path=record_path, force=force, progress=progress, num_threads=num_threads,
                          pools=[AuditDataset(texts=tuple(split.pool["text"]),
                                              labels=split.pool["is_member"].to_numpy())],  # the record's pool
                          replace_others=True)  # the demo's own names and files: another count or key replaces them
    return DemoShadows(uris=built.uris, record_path=record_path, key_file=key_file, trained=built.trained,
                       n_candidates=len(candidates), n_groups=int(candidates["article_id"].nunique()),
                       seconds=round(time.perf_counter() - t0, 1))
