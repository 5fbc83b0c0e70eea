"""The tag scopes of the audit kinds on registry versions: which ``mia.*`` tags belong to which kind.

A membership audit writes its headline tags as ``mia.*`` and replaces its own stale ones; every other kind
writes under ``mia.<kind>.`` (``mia.ner.``, ``mia.canary.``, a new kind's), which the membership audit never
deletes. :func:`register_scope` is called by :func:`mlflow_mia.pipeline.register_audit` with the kind's
``scope``.
"""

from __future__ import annotations

import re

__all__ = ["CANARY_PREFIX", "NER_PREFIX", "KIND_SCOPES", "register_scope"]

CANARY_PREFIX = "mia.canary."  # headline tags of canary audits (tracking/canary_log.py)
NER_PREFIX = "mia.ner."  # headline tags of NER audits (tracking/ner_log.py)

#: The tag scopes of the audit kinds other than membership (``mia.<kind>.``): a membership audit, whose headline
#: tags are ``mia.*``, never deletes theirs. :func:`register_scope` adds a kind's (``register_audit(scope=...)``).
KIND_SCOPES: set[str] = {CANARY_PREFIX, NER_PREFIX}


def register_scope(scope: str) -> str:
    """Add an audit kind's tag scope to :data:`KIND_SCOPES`; returns it.

    Raises
    ------
    ValueError
        ``scope`` is not ``mia.`` or ``mia.<name>.`` with a name of lowercase letters, digits and ``_``.
    """
    if scope != "mia." and not re.fullmatch(r"mia\.[a-z][a-z0-9_]*\.", scope or ""):
        raise ValueError(f"an audit kind's tag scope is 'mia.<name>.' (e.g. 'mia.toy.'), not {scope!r}")
    if scope != "mia.":
        KIND_SCOPES.add(scope)
    return scope
