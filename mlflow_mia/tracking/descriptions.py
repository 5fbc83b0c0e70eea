"""Descriptions of runs and registry versions: the tool's verdict first, anyone else's text quoted after it.

A model author's description that imitates a verdict (``Verdict: within budget``) must
never read as the tool's: :func:`with_own_text` keeps it, after a rule, as a Markdown
quote under :data:`OWN_TEXT_HEADING`.
"""

from __future__ import annotations

__all__ = ["short_model_name", "audit_run_name", "references_label", "VERDICT_CODE_METRIC"]

#: The four verdicts (:mod:`mlflow_mia.tracking.verdict`), mildest first.
VERDICTS = ("within budget", "no evidence of leakage", "inconclusive", "leaks")
#: The metric that holds the verdict as a number (:func:`verdict_code`): in the run's metrics and in the
#: ``metrics`` of what ``mlflow.models.evaluate`` returns.
VERDICT_CODE_METRIC = "mia_verdict_code"
#: First words of every description written here: a description that starts otherwise is someone else's (the
#: model's authors', the user's) and is kept, quoted under :data:`OWN_TEXT_HEADING` after the verdict.
DESCRIPTION_START = "**Verdict:"
#: First words of the description of an ``mlflow run`` project run whose command failed before it wrote a verdict
#: (:func:`mlflow_mia.tracking.runs.record_project_failure`): also this package's.
FAILURE_START = "**Failed:"
#: The heading under which a description written before the audit is kept: it can never read as the verdict.
OWN_TEXT_HEADING = ("**Description written before this audit** (kept as written, quoted; not written by mlflow-mia "
                    "and not its verdict: the verdict is the line above and the `mia.verdict` tag):")


def own_text(current: str | None) -> str:
    """The part of a run's or version's description that mlflow-mia did not write ('' when none).

    A description that starts with :data:`DESCRIPTION_START` (or is a failed command's,
    :data:`FAILURE_START`) is this package's: what it quotes under
    :data:`OWN_TEXT_HEADING` (unquoted) is the earlier text. Any other
    description is someone else's, whole; one that imitates a verdict (``Verdict: within
    budget``) included.

    >>> own_text("Verdict: within budget. Fine-tuned on notes.")
    'Verdict: within budget. Fine-tuned on notes.'
    >>> own_text(with_own_text("**Verdict: leaks** (...).", "Verdict: within budget\\n\\nMy notes."))
    'Verdict: within budget\\n\\nMy notes.'
    >>> own_text("**Verdict: leaks** (...).")
    ''
    """
    if not current:
        return ""
    if not current.startswith((DESCRIPTION_START, FAILURE_START)):
        return current.strip()
    if OWN_TEXT_HEADING not in current:
        return ""
    quoted = current.split(OWN_TEXT_HEADING, 1)[1].strip("\n").splitlines()
    return "\n".join(line[2:] if line.startswith("> ") else line[1:] if line.startswith(">") else line
                     for line in quoted).strip()


def with_own_text(description: str, current: str | None) -> str:
    """``description`` (this audit's, starting with the verdict) followed by the text it replaces, quoted.

    The earlier text (:func:`own_text` of ``current``) is kept, after a rule, under
    :data:`OWN_TEXT_HEADING`, every line a Markdown quote: a model author's
    ``Verdict: within budget`` can never be read as the tool's verdict, which comes first.

    >>> print(with_own_text("**Verdict: leaks** (gate failed).", "Verdict: within budget"))  # doctest: +ELLIPSIS
    **Verdict: leaks** (gate failed).
    <BLANKLINE>
    ---
    <BLANKLINE>
    **Description written before this audit** (kept as written, quoted; not written by mlflow-mia and not its ...
    <BLANKLINE>
    > Verdict: within budget
    """
    text = own_text(current)
    if not text:
        return description
    quoted = "\n".join(f"> {line}" if line.strip() else ">" for line in text.splitlines())
    return f"{description}\n\n---\n\n{OWN_TEXT_HEADING}\n\n{quoted}"


def verdict_code(verdict: str) -> int:
    """The verdict as a number, its index in :data:`VERDICTS` (higher is worse): ``0`` within budget,
    ``1`` no evidence of leakage, ``2`` inconclusive, ``3`` leaks.

    A metric can only hold a number: :data:`VERDICT_CODE_METRIC` holds this code, so that
    ``mlflow.models.evaluate(...).metrics`` and the run's metrics carry the verdict (the reason is
    in the ``verdict`` artifact and the ``mia.verdict.reason`` tag).

    Raises
    ------
    ValueError
        ``verdict`` is not one of :data:`VERDICTS`.

    >>> [verdict_code(v) for v in ("within budget", "no evidence of leakage", "inconclusive", "leaks")]
    [0, 1, 2, 3]
    """
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {list(VERDICTS)}, not {verdict!r}")
    return VERDICTS.index(verdict)


def named_with_verdict(name: str, verdict: str) -> str:
    """A run name that opens with the verdict: ``[leaks] tgt v2 / ref v1``.

    MLflow 3.17's run list shows, without configuring columns, only the run name, its
    creation time, dataset, duration, source and models (``getDefaultSelectedColumns`` of
    its experiment page: no tag, metric, parameter or description column), and the compare
    view's "Run details" start with the names: the name is the one place a verdict shows
    in both. It comes first, so a name cut short by the column (at about 20 characters)
    keeps it. A verdict
    already in front (a resumed or re-described run) is replaced, not repeated.

    Parameters
    ----------
    name : str
        The run's name, with or without a verdict in front.
    verdict : str
        One of :data:`VERDICTS`.

    Raises
    ------
    ValueError
        ``verdict`` is not one of :data:`VERDICTS`.

    >>> named_with_verdict("tgt v2 / ref v1", "leaks")
    '[leaks] tgt v2 / ref v1'
    >>> named_with_verdict("[leaks] tgt v2 / ref v1", "within budget")
    '[within budget] tgt v2 / ref v1'
    """
    verdict_code(verdict)  # checks it
    return f"[{verdict}] {name_without_verdict(name)}"


def name_without_verdict(name: str) -> str:
    """The run name without the verdict :func:`named_with_verdict` put in front (any other name as it is).

    >>> name_without_verdict("[no evidence of leakage] cmp"), name_without_verdict("[draft] cmp")
    ('cmp', '[draft] cmp')
    """
    for known in VERDICTS:
        if name.startswith(f"[{known}] "):
            return name[len(known) + 3:]
    return name


def short_model_name(uri) -> str:
    """A model URI as a run name shows it: ``models:/bbc-target/3`` -> ``bbc-target v3``.

    ``models:/name@alias`` stays as ``name@alias``, ``runs:/<id>/<path>`` becomes
    ``run <first 8 hex>/<path>``, a folder its last component, a PEFT adapter's base ``base``.

    >>> short_model_name("models:/bbc-target/3"), short_model_name("models:/bbc-reference@champion")
    ('bbc-target v3', 'bbc-reference@champion')
    >>> short_model_name("runs:/0123456789abcdef/model"), short_model_name("/data/models/my-bert/")
    ('run 01234567/model', 'my-bert')
    >>> short_model_name("base of models:/bbc-lora-target/1")
    'base'
    """
    text = str(uri)
    if text.startswith("base of "):  # mlflow_mia.models.resolve.resolve_reference("base", ...)
        return "base"
    if text.startswith("models:/"):
        parts = text[len("models:/"):].strip("/").split("/")
        return f"{parts[0]} v{parts[1]}" if len(parts) == 2 and parts[1].isdigit() else "/".join(parts)
    if text.startswith("runs:/"):
        run_id, _, path = text[len("runs:/"):].partition("/")
        return f"run {run_id[:8]}/{path}".rstrip("/")
    stripped = text.rstrip("/\\")
    return stripped.replace("\\", "/").rsplit("/", 1)[-1] or text


def audit_run_name(target, reference=None) -> str:
    """``<target> / <reference>`` (or ``<target>``), with :func:`short_model_name`: the run list cuts a name at
    about 20 characters, so it holds what was audited and nothing else (the verdict goes in front,
    :func:`named_with_verdict`).

    >>> audit_run_name("models:/bbc-target/3", "models:/bbc-reference/1"), audit_run_name("models:/tgt/2")
    ('bbc-target v3 / bbc-reference v1', 'tgt v2')
    """
    name = short_model_name(target)
    return f"{name} / {short_model_name(reference)}" if reference else name


def references_label(references) -> str | None:
    """The references of one audit as a run name shows them: one name, or the first and how many more.

    Parameters
    ----------
    references : sequence of ResolvedModel or str
        Resolved models (their ``resolved_uri``) or URIs; empty: None.

    >>> references_label(["models:/r/1"]), references_label(["models:/r/1", "models:/s/2", "models:/t/1"])
    ('r v1', 'r v1 +2 more')
    """
    uris = [getattr(r, "resolved_uri", r) for r in references or ()]
    if not uris:
        return None
    first = short_model_name(uris[0])
    return first if len(uris) == 1 else f"{first} +{len(uris) - 1} more"
