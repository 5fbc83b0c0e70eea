"""What an option's help says: its default in words, its full text (the options reference, the evaluator keys)
and its short text (``--help``).

Each function takes an :class:`~mlflow_mia.options.schema.Entry` (an option and who takes it).
"""

from __future__ import annotations

__all__: list[str] = []


def render_default(value) -> str:
    """A default as a user writes it: true/false, comma-joined lists, plain numbers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(render_default(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def default_text(e) -> str:
    """The default in words: ``default_doc``, else the rendered default, else '' (none)."""
    of = e.field
    if of.option.default_doc:
        return of.option.default_doc
    if of.default is None or of.default == "":
        return ""
    return render_default(of.default)


#: Above this many characters an option's help is cut at its first clause in ``--help`` (unless it has a ``short``).
SHORT_HELP = 160


def first_clause(text: str, limit: int = SHORT_HELP) -> str:
    """``text`` up to its first ``"; "`` or ``". "`` outside brackets when longer than ``limit`` (and the clause
    holds 40 characters or more); else ``text``.

    >>> first_clause("a short help; kept whole")
    'a short help; kept whole'
    >>> first_clause("seed of the audit's random draws (masks; bootstrap); " + "more " * 40)
    "seed of the audit's random draws (masks; bootstrap)"
    """
    if len(text) <= limit:
        return text
    depth = 0
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and text.startswith(("; ", ". "), i) and i >= 40:
            return text[:i]
    return text


def full_help(e, *, short: bool = False) -> str:
    """An option's help with its range and default; ``short``: what ``--help`` shows (:func:`help_text`)."""
    of = e.field
    parts = [of.option.range_text() or of.option.pattern_doc or "", f"default: {default_text(e)}"
             if default_text(e) else ""]
    extra = "; ".join(p for p in parts if p)
    text = (of.option.short or first_clause(of.option.help)) if short else of.option.help
    return f"{text} ({extra})" if extra else text


def help_text(e) -> str:
    """What ``--help`` says of an option: its ``short`` help, else its help cut at the first clause when over
    :data:`SHORT_HELP` characters; the full text is in the options reference (docs/reference/options.md)."""
    return full_help(e, short=True)
