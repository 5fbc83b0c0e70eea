"""What the command line checks before it imports torch, transformers or MLflow: the input files exist.

``mlflow-mia`` loads its option schema (which imports the attacks, torch and pandas) to build
its parser: 5 to 30 s on a busy machine before the first check. :func:`check_argv` reads the
raw arguments with the standard library only, so a missing ``--data`` file is reported in
about a second (exit code 2), named by the option as this front end spells it
(:func:`spell_flag`: ``--data`` on the command line, ``-P data=`` under ``mlflow run``),
with the files of that folder whose names are close ("did you mean ...?").
The same checks run again later, from the parsed options; this only makes them early.
"""

from __future__ import annotations

import os

from mlflow_mia.naming import did_you_mean

__all__: list[str] = []

#: The options whose value is a file that must exist, and what the file is. A test holds this equal to the
#: declared options with ``metavar="PATH"`` that are read (not ``--spark-store``, which is written).
INPUT_FILES = {"--data": "the target pool", "--population": "the population set", "--names": "the names table",
               "--canaries": "the canary set", "--hash-key-file": "the hash key",
               "--shadow-record": "the shadow record", "--dc-pdd-frequencies": "the token frequency table",
               "--prompts": "the prompt table", "--handwritten-prompts": "the handwritten prompt table",
               "--recipe": "the recipe", "--candidates": "the candidate texts", "--pool": "the audited pool"}


def under_mlflow_run() -> bool:
    """True under ``mlflow run`` (``$MLFLOW_RUN_ID`` set): options are then ``-P name=value`` parameters."""
    return bool(os.environ.get("MLFLOW_RUN_ID"))


def spell_flag(flag: str, *, mlproject: bool | None = None) -> str:
    """An option as the user gave it: ``--group-column`` on the command line, ``-P group_column=`` under
    ``mlflow run`` (the MLproject parameter is the flag without dashes, with underscores).

    >>> spell_flag("--group-column", mlproject=False), spell_flag("--group-column", mlproject=True)
    ('--group-column', '-P group_column=')
    """
    mlproject = under_mlflow_run() if mlproject is None else mlproject
    return f"-P {flag.lstrip('-').replace('-', '_')}=" if mlproject else flag


def _values(argv):
    """``(flag, value)`` for each ``--flag value`` and ``--flag=value`` in ``argv``."""
    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            continue
        flag, eq, value = arg.partition("=")
        if eq:
            yield flag, value
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            yield flag, argv[i + 1]


def _missing(flag: str, path: str) -> str | None:
    """Why ``path``, the value of ``flag``, cannot be read as a file, or None when it can."""
    what = INPUT_FILES[flag]
    if os.path.isdir(path):
        return f"{what} file {path!r} is a folder ({spell_flag(flag)}): give the file"
    if os.path.exists(path):  # a file (or a device: the option's own check says what is wrong with it)
        return None
    folder, name = os.path.split(path)
    try:
        near = did_you_mean(name, sorted(f for f in os.listdir(folder or ".") if not f.startswith(".")))
    except OSError:  # the folder is missing too
        near = f"; the folder {folder!r} does not exist either" if folder else ""
    return f"{what} file {path!r} does not exist ({spell_flag(flag)}){near}"


def check_argv(argv) -> tuple[str, str] | None:
    """``(command, message)`` for the first input file that does not exist, or None.

    Parameters
    ----------
    argv : list of str
        The arguments after ``mlflow-mia`` (flags already dashed: ``--text-column``). A blank value (an unset
        MLproject parameter) is skipped, as the parser skips it.

    >>> check_argv(["audit", "--data", "/no/such/pool.csv", "--target", "x"])
    ('audit', "the target pool file '/no/such/pool.csv' does not exist (--data); the folder '/no/such' does not exist either")
    >>> check_argv(["--help"]) is None
    True
    """
    command = next((a for a in argv if not a.startswith("-")), None)
    if command is None or any(a in ("-h", "--help") for a in argv):
        return None
    for flag, value in _values(argv):
        if flag in INPUT_FILES and value.strip():
            message = _missing(flag, value.strip())
            if message is not None:
                return command, message
    return None
