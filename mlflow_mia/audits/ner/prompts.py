"""Prompt templates of the NER memorization audit: loading, validation, properties.

A prompt is a sentence with exactly one slot ``{name}`` where an entity name is
put (``MASK`` in Xia et al. 2025, Sect. 3.2). Each prompt belongs to one entity
type and one sentence type (declarative, exclamatory, imperative, interrogative).
The package ships a prompt set written for this project
(``mlflow_mia/audits/ner/prompt_sets/ner_prompts.csv``) and five hand-written prompts per type for
the One-PT / Mix-PT baselines (``ner_handwritten_prompts.csv``).
"""

from __future__ import annotations

import re
from importlib import resources
import pandas as pd

from mlflow_mia.signals.entity_confidence import SLOT, fill, short, split_prompt
from mlflow_mia.audits.ner.names import read_private_table

__all__ = ["load_prompts", "fill"]


SENTENCE_TYPES = ("declarative", "exclamatory", "imperative", "interrogative")


def prompt_words(prompt: str) -> list[str]:
    """Whitespace words of the prompt; the slot (with any attached punctuation) is one word."""
    return prompt.split()


def slot_position(prompt: str) -> str:
    """``"start"`` (slot is the first word), ``"end"`` (the last word) or ``"middle"``.

    >>> slot_position("{name} is here."), slot_position("Meet {name} today"), slot_position("I met {name}!")
    ('start', 'middle', 'end')
    """
    words = prompt_words(prompt)
    at = [i for i, w in enumerate(words) if SLOT in w]
    if len(at) != 1:
        split_prompt(prompt)  # raises with the count
    if at[0] == 0:
        return "start"
    return "end" if at[0] == len(words) - 1 else "middle"


def check_prompts(prompts, *, entity_types=None, what: str = "prompts"):
    """Validate a prompt table and return it with ``prompt_id``, ``slot_position`` and ``n_words``.

    Parameters
    ----------
    prompts : pandas.DataFrame
        Columns ``prompt`` (str with one ``{name}``), ``entity_type`` (str) and
        ``sentence_type`` (optional; one of :data:`SENTENCE_TYPES` or any label).
        ``MASK`` as the slot (the paper's spelling) is accepted and rewritten.
    entity_types : iterable of str, optional
        Types the audit needs; each must have at least one prompt.

    Returns
    -------
    pandas.DataFrame
        Columns ``prompt_id`` (``{type}-{i:03d}`` unless given), ``prompt``,
        ``entity_type``, ``sentence_type``, ``slot_position``, ``n_words`` (words
        besides the name).

    Raises
    ------
    ValueError
        Missing columns, empty table, a prompt without exactly one slot (lists up to
        five offending rows), a needed type without prompts.
    """
    if not isinstance(prompts, pd.DataFrame):
        raise ValueError(f"{what} must be a DataFrame or a .csv/.jsonl path, got {type(prompts).__name__}")
    missing = [c for c in ("prompt", "entity_type") if c not in prompts.columns]
    if missing:
        raise ValueError(f"{what} lacks column(s) {missing}; columns needed: prompt, entity_type, sentence_type")
    if prompts.empty:
        raise ValueError(f"{what} is empty")
    df = prompts.copy()
    df["prompt"] = [re.sub(r"\bMASK\b", SLOT, str(p)) if SLOT not in str(p) else str(p) for p in df["prompt"]]
    bad = [(i, p) for i, p in enumerate(df["prompt"]) if p.count(SLOT) != 1]
    if bad:
        raise ValueError(f"{what}: {len(bad)} prompt(s) do not hold exactly one {SLOT} slot, e.g. "
                         f"{[f'row {i}: {short(p)}' for i, p in bad[:5]]}; write the slot once as {SLOT}")
    if "sentence_type" not in df.columns:
        df["sentence_type"] = "unknown"
    df["entity_type"] = df["entity_type"].astype(str)
    if entity_types is not None:
        absent = [t for t in entity_types if t not in set(df["entity_type"])]
        if absent:
            raise ValueError(f"{what} hold no prompt for entity type(s) {absent}; types present: "
                             f"{sorted(set(df['entity_type']))}. Add prompts or restrict entity_types")
        df = df[df["entity_type"].isin(list(entity_types))]
    if "prompt_id" not in df.columns:
        df["prompt_id"] = [f"{t}-{i:03d}" for t, i in zip(df["entity_type"], df.groupby("entity_type").cumcount())]
    df["slot_position"] = [slot_position(p) for p in df["prompt"]]
    df["n_words"] = [len(prompt_words(p)) - 1 for p in df["prompt"]]
    cols = ["prompt_id", "prompt", "entity_type", "sentence_type", "slot_position", "n_words"]
    return df[cols].reset_index(drop=True)


def shipped_prompts(kind: str = "generated"):
    """The shipped prompt set (``"generated"``) or the hand-written baselines (``"handwritten"``)."""
    file = {"generated": "ner_prompts.csv", "handwritten": "ner_handwritten_prompts.csv"}.get(kind)
    if file is None:
        raise ValueError(f"kind must be 'generated' or 'handwritten', got {kind!r}")
    with resources.files("mlflow_mia.audits.ner.prompt_sets").joinpath(file).open("r", encoding="utf-8") as fh:
        return pd.read_csv(fh)


def load_prompts(source=None, *, entity_types=None, kind: str = "generated"):
    """Prompts from a DataFrame, a .csv / .jsonl path, or the shipped set (None).

    Returns and raises as :func:`check_prompts`.
    """
    if source is None:
        df = shipped_prompts(kind)
    elif isinstance(source, pd.DataFrame):
        df = source
    else:
        df = read_private_table(source, what="prompts")
    return check_prompts(df, entity_types=entity_types, what="handwritten prompts" if kind == "handwritten"
                         else "prompts")

