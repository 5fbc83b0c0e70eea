"""Files generated from the option declarations: ``MLproject`` and ``docs/reference/options.md``.

Every option is declared once (:func:`mlflow_mia.option.option`); the MLproject entry
points and the options reference page are written from those declarations by::

    python -m mlflow_mia.entrypoints.generate            # rewrite both files
    python -m mlflow_mia.entrypoints.generate --check    # exit 1 when either is out of date
    python -m mlflow_mia.entrypoints.generate --declarations   # every option key and where it is declared

The script sits in the entry-point layer (:mod:`mlflow_mia.entrypoints.generate`): it imports every
registered audit first, so an audit kind whose own folder registers its option family
(:func:`~mlflow_mia.options.families.register_family`) gets its MLproject entry point and its reference rows.

A test (``tests/options/test_generate.py``) fails when a committed file differs from
what this module writes, and prints the first command above.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

from mlflow_mia.attacks import ATTACKS
from mlflow_mia.option import declared_options
from mlflow_mia.options.families import FAMILIES
from mlflow_mia.options.helptext import default_text
from mlflow_mia.options.schema import (Entry, dest, entries, flag_of, help_rank, mlproject_parameters,
                                       options_for, surface_order)

__all__ = ["main"]

#: The command that rewrites the generated files (printed by the test when they are out of date).
REGENERATE = "python -m mlflow_mia.entrypoints.generate"

#: MLproject entry points, in file order: ``{command: comment}``. Each is a thin call of ``mlflow-mia <command>``.
ENTRY_POINTS = {
    "audit": "Membership inference audit of one model; defaults build and audit the BBC News demo.",
    "compare": "Audit registered versions (by alias) side by side; defaults compare the demo target's two versions.",
    "ner-audit": "NER prompt memorization audit (Xia et al. 2025); defaults build and audit the WNUT-16 demo.",
    "canary-audit": "Canary audit: exposure and the one-run epsilon bound of planted canaries; defaults audit the "
                    "canary demo.",
    "analyze": "Why the demo target leaks and what lowers it: variants trained and audited, one run each.",
    "build-demo": "Train and register the BBC News demo models.",
    "train-shadows": "Train and register shadow models of your target with its recipe (online LiRA's shadows).",
}



def entry_points() -> dict[str, str]:
    """Every MLproject entry point, in file order: :data:`ENTRY_POINTS`, each audit kind registered with its own
    command (:func:`~mlflow_mia.options.families.register_family`) after the built-in audits."""
    kinds = {f.command: f.summary for f in FAMILIES.values() if getattr(f, "command", None)}
    built_in = list(ENTRY_POINTS.items())
    at = [c for c, _ in built_in].index("canary-audit") + 1
    return dict(built_in[:at] + [(c, s) for c, s in kinds.items() if c not in ENTRY_POINTS] + built_in[at:])


#: Parameters an entry point passes that no option declares: ``build-demo --size`` and the ``train-shadows`` flags
#: (argparse in the CLI).
_EXTRA_PARAMETERS = {"build-demo": {"size": ("string", "default", "--size")},
                     "train-shadows": {  # mlflow_mia.entrypoints.shadows_cli
                         "recipe": ("string", "", "--recipe"), "candidates": ("string", "", "--candidates"),
                         "candidates_text_column": ("string", "text", "--candidates-text-column"),
                         "candidates_group_column": ("string", "", "--candidates-group-column"),
                         "count": ("float", "16", "--count"), "name": ("string", "", "--name"),
                         "record": ("string", "", "--record"), "halves_seed": ("float", "0", "--halves-seed"),
                         "pool": ("string", "", "--pool"),
                         "pool_text_column": ("string", "text", "--pool-text-column"),
                         "pool_label_column": ("string", "is_member", "--pool-label-column")}}

#: Options left blank ("not given") in MLproject although they have a default: the demo supplies its own when
#: they are not given (its text column, ``mlflow_mia.entrypoints.cli``; only the FPRs its population resolves,
#: ``mlflow_mia.entrypoints.common``), which a written default would override.
#: Also blank: the options of one model kind or one attack. ``mlflow run`` logs every declared parameter on every
#: run, so a causal audit would show a masked LM's ``num_masks``; left blank they reach the CLI (and the run's
#: params) when given, and the audit logs those that apply (:mod:`mlflow_mia.tracking.run_params`).
_APPLY_TO_SOME = frozenset({"signal", "num_masks", "mask_rate", "energy_reduction", "num_neighbours"})


def passed_on_options(command: str) -> set[str]:
    """The options of ``command`` passed on when given, not declared: read when called, so an attack
    registered later (its file plus one import line) has its settings among them."""
    if command not in ("audit", "compare"):
        return set()
    return {"fprs", "text_column", *_APPLY_TO_SOME, *(key for a in ATTACKS.values() for key in declared_options(a.Settings))}

_HEADER = f"""\
# Generated from the option declarations by `{REGENERATE}`; do not edit by hand.
# Every option: docs/reference/options.md. An option with no default is no parameter here (MLflow would log
# it as ''): name it with -P name=value and MLflow passes it on as --name value.
#   mlflow run . -e audit --env-manager local -P demo_size=small --experiment-name mlflow-mia
"""


def _ordered(command: str) -> list[Entry]:
    """The options of ``command`` in ``--help`` order: by declaring class (as the CLI groups them), then field."""
    return sorted(options_for(command).values(), key=help_rank)


def _yaml_scalar(kind: str, value: str) -> str:
    if kind == "float":
        if "e" in value and "." not in value.split("e")[0]:  # YAML reads 1e-05 as a string, 1.0e-05 as a number
            mantissa, exponent = value.split("e")
            value = f"{mantissa}.0e{exponent}"
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _wrap(words: list[str], width: int = 110, indent: str = "      ") -> list[str]:
    lines, line = [], indent
    for word in words:
        if line.strip() and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = indent
        line = f"{line} {word}" if line.strip() else f"{line}{word}"
    return lines + [line]


def _entry_point(command: str) -> list[str]:
    params = mlproject_parameters(command)
    rows = [(dest(e), *params[dest(e)], flag_of(command, dest(e))) for e in _ordered(command) if dest(e) in params]
    rows = [(name, kind, "" if name in passed_on_options(command) else default, flag)
            for name, kind, default, flag in rows]
    rows += [(name, kind, default, flag) for name, (kind, default, flag) in _EXTRA_PARAMETERS.get(command, {}).items()]
    rows.sort(key=lambda r: r[0] != "size")  # build-demo's own flag first
    # An option without a default is not a parameter: MLflow logs every declared parameter, so a blank one
    # would show '' on the run; given with -P name=value, MLflow passes it on as --name value (and logs it).
    given = [r for r in rows if r[2] != ""]
    out = [f"  {command}:", f"    # {entry_points()[command]}"]
    blank = [name for name, _, default, _ in rows if default == ""]
    if blank:
        out += [line.replace("      ", "    # ", 1) for line in
                _wrap(["Also, when given (-P name=value, passed on as --name value):"] + [f"{n}," for n in blank[:-1]]
                      + [blank[-1]], width=110)]
    out.append("    parameters:")
    for name, kind, default, _ in given:
        out.append(f"      {name}: {{type: {kind}, default: {_yaml_scalar(kind, default)}}}")
    words = ["mlflow-mia", command] + [f"{flag} {{{name}}}" for name, _, _, flag in given]
    out += ["    command: >-", *_wrap(words)]
    return out


def mlproject_text() -> str:
    """The ``MLproject`` file: one entry point per command of :func:`entry_points`, its parameters the options."""
    lines = [_HEADER.rstrip("\n"), "name: mlflow-mia", "", "conda_env: conda.yaml", "", "entry_points:"]
    for i, command in enumerate(entry_points()):
        if i:
            lines.append("")
        lines += _entry_point(command)
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def _used_by(surfaces) -> str:
    order = surface_order()
    return ", ".join(f"`{s}`" for s in sorted(surfaces, key=order.index))


def options_reference() -> str:
    """``docs/reference/options.md``: every option once, with its key, flag, commands, default and meaning."""
    by_key: dict[str, list[Entry]] = defaultdict(list)
    for e in entries():
        by_key[e.key].append(e)
    lines = [
        "# Options",
        "",
        f"<!-- Generated from the option declarations by `{REGENERATE}`; do not edit by hand. -->",
        "",
        "This page answers which options every command, evaluator key and MLproject parameter takes, with its",
        "default: the `mlflow-mia` commands, the MLflow evaluator (`evaluator_config={\"mia\": {...}}`, methods",
        "`mia`, `ner_prompts`, `canaries`) and the MLproject entry points. Each option is declared once, on the",
        "config field that holds it (`mlflow_mia/option.py`); the flag, the evaluator key and the MLproject",
        "parameter all come from that declaration. The evaluator key is the option's key; the MLproject parameter",
        "is the flag without dashes, with underscores. A key with no flag is an evaluator key only; a key whose",
        "\"used by\" names only commands is a command option (no evaluator key).",
        "",
    ]
    sections = [("Commands only", lambda es: all(e.family is None for e in es)),
                ("Logging and execution (every audit)", lambda es: any(e.family == "common" for e in es)),
                ("Audit settings", lambda es: True)]
    done = set()
    for title, keep in sections:
        keys = [k for k, es in by_key.items() if k not in done and keep(es)]
        if not keys:
            continue
        done.update(keys)
        lines += [f"## {title}", "", "| key | flag | used by | default | meaning |", "|---|---|---|---|---|"]
        for key in keys:
            lines.append(_row(key, by_key[key]))
        lines.append("")
    return "\n".join(lines)


def _row(key: str, es: list[Entry]) -> str:
    first = es[0].field
    opt = first.option
    flags = opt.flags or ("--" + key.replace("_", "-"),)
    flag = ", ".join(f"`{f}`" for f in flags) if opt.cli else ""
    used_by = set().union(*(e.used_by for e in es))
    defaults = defaultdict(set)
    for e in es:
        defaults[default_text(e) or "none"].update(e.used_by)
    if len(defaults) == 1:
        default = next(iter(defaults))
    else:
        default = "; ".join(f"{text} ({_used_by(where)})" for text, where in defaults.items())
    meaning = opt.help
    extra = opt.range_text() or opt.pattern_doc or ""
    if opt.choices:
        extra = "one of " + ", ".join(f"`{c}`" for c in opt.choices)
    if extra:
        meaning = f"{meaning} ({extra})"
    if opt.invert:
        meaning = f"{meaning}; flag: {opt.flag_help or 'turns it off'}"
    return f"| `{key}` | {_cell(flag)} | {_used_by(used_by)} | {_cell(default)} | {_cell(meaning)} |"


def _callee(node) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def declarations(package: Path | None = None) -> dict[tuple[str, str], list[str]]:
    """Every place in the package source that declares an option, by ``(kind, key)``.

    An AST scan: ``("option", key)`` for each ``option(...)`` field (its key: the ``key=``
    argument, else the field name), ``("add_argument", key)`` for an ``add_argument`` call
    with a literal flag of a declared option, ``("key list", key)`` for a module-level
    constant named ``*KEYS`` that lists option keys. ``demo/`` is left out: its builder
    scripts have a few flags of their own, not audit options.

    Returns
    -------
    dict of (str, str) to list of str
        ``"<path>:<Class>.<field>"`` (options) or ``"<path>:<line>"`` (the others), in file order.
    """
    package = package or Path(__file__).resolve().parents[1]
    flags, keys = {}, set()
    for e in entries():
        keys.add(e.key)
        for flag in e.field.option.flags or ("--" + e.key.replace("_", "-"),):
            flags[flag] = e.key
    found = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent)
        if len(rel.parts) > 2 and rel.parts[1] == "demo":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.value, ast.Call)
                            and _callee(stmt.value) == "option"):
                        key = next((k.value.value for k in stmt.value.keywords if k.arg == "key"), stmt.target.id)
                        found[("option", key)].append(f"{rel.as_posix()}:{node.name}.{stmt.target.id}")
            elif isinstance(node, ast.Call) and _callee(node) == "add_argument":
                for key in {flags[a.value] for a in node.args if isinstance(a, ast.Constant) and a.value in flags}:
                    found[("add_argument", key)].append(f"{rel.as_posix()}:{node.lineno}")
        for stmt in tree.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if any(isinstance(t, ast.Name) and t.id.endswith("KEYS") for t in targets):
                    for const in ast.walk(stmt.value):
                        if isinstance(const, ast.Constant) and const.value in keys:
                            found[("key list", const.value)].append(f"{rel.as_posix()}:{stmt.lineno}")
    return dict(found)


def generated_files(root: Path) -> dict[Path, str]:
    """``{path: text}`` of the generated files under the repository ``root``."""
    return {root / "MLproject": mlproject_text(), root / "docs" / "reference" / "options.md": options_reference()}


def main(argv=None) -> int:
    """Write (or ``--check``) the generated files, or list the ``--declarations``; the exit code is 1 when stale."""
    parser = argparse.ArgumentParser(prog=REGENERATE, description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2],
                        help="repository root (default: the one holding this package)")
    parser.add_argument("--check", action="store_true", help="only report files that are out of date")
    parser.add_argument("--declarations", action="store_true", help="list every option key and where it is declared")
    args = parser.parse_args(argv)
    if args.declarations:
        found = declarations()
        for (kind, key), places in sorted(found.items(), key=lambda kv: kv[0][1]):
            print(f"{key:<28} {kind:<13} {len(places)}  {', '.join(places)}")
        options = [k for k in found if k[0] == "option"]
        print(f"{sum(len(found[k]) for k in options)} option() declarations for {len(options)} keys")
        return 0
    stale = [path for path, text in generated_files(args.root).items()
             if not path.exists() or path.read_text(encoding="utf-8") != text]
    if args.check:
        for path in stale:
            print(f"{path} is out of date; run: {REGENERATE}")
        return 1 if stale else 0
    for path, text in generated_files(args.root).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":  # the audit kinds register their families above this layer: the script is there
    sys.exit(f"run {REGENERATE} (it registers every audit kind before writing the files)")
