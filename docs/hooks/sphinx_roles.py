"""Sphinx roles in docstrings as cross-references on the documentation site (a griffe extension).

The package's docstrings name other objects with Sphinx roles (``:func:`~mlflow_mia.x.f```,
``:class:`Verdict```, ``:mod:`.audit_log```), which mkdocstrings would show as raw text. This
extension, listed under the mkdocstrings handler's ``extensions`` in ``mkdocs.yml``, rewrites
each role in a docstring, as it is loaded, into an *optional* mkdocs-autorefs reference::

    <autoref identifier="mlflow_mia.x.f" optional><code>f</code></autoref>

autorefs turns it into a link when the target is documented on the site, and into the code
text alone (no warning, no broken link) when it is not. The title follows Sphinx: ``~`` shows
the last part of the name, otherwise the name as written. A target is resolved as Sphinx
would look it up from the docstring's module: ``.name`` relative to the module's package,
an unqualified or ``Class.method`` name inside the module, a name starting with a package
(``mlflow_mia``, ``mlflow``, ...) as it is.
"""

from __future__ import annotations

import html
import re

import griffe

#: The roles rewritten (Sphinx's Python domain).
ROLES = ("func", "class", "mod", "data", "meth", "attr", "exc", "obj", "const", "type")
ROLE = re.compile(r":(?:py:)?(?P<role>" + "|".join(ROLES) + r"):`(?P<tilde>~?)(?P<target>[^`<>]+?)`")
#: First parts of names taken as absolute (top-level packages); anything else is looked up in the module.
PACKAGES = frozenset({"mlflow_mia", "mlflow", "pandas", "numpy", "torch", "transformers", "sklearn", "scipy",
                      "datasets", "peft", "matplotlib", "pyspark", "evaluate", "opacus", "accelerate", "griffe"})


def resolve(target: str, module: str, *, is_package: bool = False) -> str:
    """The full dotted name ``target`` refers to from a docstring of ``module``.

    >>> resolve(".membership.audit_and_log", "mlflow_mia.pipeline", is_package=True)
    'mlflow_mia.pipeline.membership.audit_and_log'
    >>> resolve(".audit_log", "mlflow_mia.tracking.runs"), resolve("Verdict.line", "mlflow_mia.tracking.verdict")
    ('mlflow_mia.tracking.audit_log', 'mlflow_mia.tracking.verdict.Verdict.line')
    >>> resolve("mlflow_mia.config.AuditConfig", "mlflow_mia.data")
    'mlflow_mia.config.AuditConfig'
    """
    target = target.strip().rstrip("()")
    if target.startswith("."):
        base = module if is_package else module.rpartition(".")[0]
        return f"{base}{target}" if base else target.lstrip(".")
    if target.split(".")[0] in PACKAGES:
        return target
    return f"{module}.{target}"


def rewrite(text: str, module: str, *, is_package: bool = False) -> str:
    """``text`` with every Sphinx role replaced by an optional autorefs reference (see the module docstring).

    >>> rewrite("See :func:`~mlflow_mia.a.f` and :class:`B`.", "mlflow_mia.m")
    'See <autoref identifier="mlflow_mia.a.f" optional><code>f</code></autoref> and \
<autoref identifier="mlflow_mia.m.B" optional><code>B</code></autoref>.'
    """
    def link(match: re.Match) -> str:
        target = match["target"].strip()
        identifier = resolve(target, module, is_package=is_package)
        title = target.rstrip("()").split(".")[-1] if match["tilde"] else target.lstrip(".")
        return (f'<autoref identifier="{html.escape(identifier, quote=True)}" optional>'
                f"<code>{html.escape(title)}</code></autoref>")

    return ROLE.sub(link, text)


class SphinxRoles(griffe.Extension):
    """Rewrites the Sphinx roles of every loaded object's docstring (:func:`rewrite`)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        docstring = obj.docstring
        if docstring is None or ":" not in docstring.value:
            return
        module = obj if obj.is_module else obj.module
        docstring.value = rewrite(docstring.value, module.path, is_package=bool(getattr(module, "is_package", False)))
