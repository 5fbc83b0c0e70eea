"""Descriptions of runs and registry versions: the tool's verdict first, anyone else's text quoted after it.

A model author's description that imitates a verdict (``Verdict: within budget``) must
never read as the tool's: :func:`with_own_text` keeps it, after a rule, as a Markdown
quote under :data:`OWN_TEXT_HEADING`.
"""

from __future__ import annotations

__all__ = ["DESCRIPTION_START", "FAILURE_START", "OWN_TEXT_HEADING", "own_text", "with_own_text"]

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
