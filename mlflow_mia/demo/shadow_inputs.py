r"""What :func:`mlflow_mia.demo.shadows.train_shadows` checks before it trains a shadow.

A shadow build takes minutes to hours, and what it writes is shared: registered models
``<name>-0 .. <name>-<k-1>`` under the alias ``champion``, and a record file. So each
input is checked first, and nothing another build owns is replaced without being asked:

- :func:`check_shadow_name`: the name goes into ``models:/`` URIs, run names and logs, so
  it is letters, digits and ``_ . -`` only (no newline, space, ``/`` or ``@``);
- :func:`refuse_other_sets`: a name whose ``champion`` holds another set's shadow (another
  recipe, candidates, count, seed or base; perhaps another user's) is refused, since
  training would move ``champion`` off it and its owner's next run would retrain every shadow;
- :func:`check_record_path`: the record's folder exists and is writable, and an existing
  file is replaced only when it is this set's own record (a repeated or resumed build).

Examples
--------
>>> check_shadow_name("my-shadow")
'my-shadow'
>>> check_shadow_name("a\nb")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: the shadows' name 'a\nb' must be 1 to 100 letters, digits and _ . - ...
"""

from __future__ import annotations

import json
import os
import re

from mlflow.exceptions import MlflowException

__all__: list[str] = []

#: What a shadow ``name`` may be: it names registered models ``<name>-<j>``.
SHADOW_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}"


def check_shadow_name(name) -> str:
    """``name`` when it can name the shadows' registered models ``<name>-0`` ... (:data:`SHADOW_NAME_PATTERN`).

    Raises
    ------
    ValueError
        Not a string of 1 to 100 letters, digits and ``_ . -`` starting with a letter or digit.
    """
    if not isinstance(name, str) or not re.fullmatch(SHADOW_NAME_PATTERN, name):
        raise ValueError(f"the shadows' name {name!r} must be 1 to 100 letters, digits and _ . - starting with a "
                         "letter or digit (--name NAME registers NAME-0 ... NAME-<K-1>; a newline, space, / or @ "
                         "would break their models:/ URIs)")
    return name


def refuse_other_sets(client, names, keys, *, alias: str, tag: str) -> None:
    """Refuse names whose ``alias`` version does not carry this set's key in its version tag ``tag``.

    Parameters
    ----------
    client : mlflow.MlflowClient
    names, keys : sequence of str
        The shadows' registered names and the key each must carry (one per shadow).
    alias, tag : str
        The shadows' alias (``champion``) and key tag.

    Raises
    ------
    ValueError
        Some ``<name>@<alias>`` holds another key, or no key (not a shadow model): the message
        names each, and the two ways on (another ``--name``, or ``--force``).
    """
    taken = []
    for shadow, key in zip(names, keys):
        try:
            version = client.get_model_version_by_alias(shadow, alias)
        except MlflowException:
            continue
        held = (version.tags or {}).get(tag)
        if held != key:
            what = f"shadow key {held[:12]}" if held else "no shadow key: not a shadow model"
            taken.append(f"{shadow}@{alias} (version {version.version}, {what})")
    if taken:
        raise ValueError(f"{', '.join(taken)} already hold(s) another set's model (another recipe, candidates, count, "
                         "halves seed or base; perhaps another user's): training would move champion off it, and its "
                         "owner's next run would retrain every shadow. Choose another --name, or give --force "
                         "(replace_others=True) to replace it")


def check_record_path(path, expected: dict, *, replace: bool) -> None:
    """Check that the record can be written at ``path`` and replaces nothing it should not.

    Parameters
    ----------
    path : path-like
    expected : dict
        This set's ``candidate_digest``, ``recipe`` (dict), ``seed``, ``key_check`` and ``k``:
        an existing file holding the same is this set's record (rewriting it changes nothing
        but the shadows' versions).
    replace : bool
        Replace any existing file.

    Raises
    ------
    ValueError
        ``path`` is a folder, its folder is missing or not writable, or it is an existing
        file that is not this set's record and ``replace`` is False.
    """
    path = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        raise ValueError(f"--record {path} is a folder; give the path of the record file (e.g. {path}/shadows.json)")
    if not os.path.isdir(folder):
        raise ValueError(f"the folder of --record {path} does not exist: create {folder} first (checked before "
                         "training, so that no shadow is trained for a record that cannot be written)")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"the folder of --record {path} is not writable by this user: give another --record")
    if not os.path.lexists(path) or replace:
        return
    try:
        with open(path, encoding="utf-8") as fh:
            found = json.load(fh)
        same = (found.get("candidate_digest") == expected["candidate_digest"]
                and found.get("recipe") == json.loads(json.dumps(expected["recipe"]))
                and found.get("seed") == expected["seed"] and found.get("key_check") == expected["key_check"]
                and len(found.get("membership", ())) == expected["k"])
    except (OSError, ValueError, AttributeError):
        same = False
    if not same:
        raise ValueError(f"--record {path} exists and is not the record of these shadows (same candidates, recipe, "
                         "--count, --halves-seed and hash key): it would be overwritten. Give another --record, or "
                         "--force to overwrite it")
