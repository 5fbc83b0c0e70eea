"""The option schema: every user option, declared once, and what is derived from it.

Each option is one dataclass field declared with :func:`mlflow_mia.option.option`:
the library configs (:class:`~mlflow_mia.config.SignalConfig`,
:class:`~mlflow_mia.config.NeighbourhoodConfig`, :class:`~mlflow_mia.config.MetricConfig`,
:class:`~mlflow_mia.config.AuditConfig`, :class:`~mlflow_mia.audits.ner.audit.NerAuditConfig`),
the front-end options (:class:`CommonOptions`, shared by both audits, and its subclasses
:class:`~mlflow_mia.options.audit.MiaOptions` and
:class:`~mlflow_mia.options.ner.NerOptions`) and the command-only
options (:class:`CommandOptions`). From these declarations come:

- the ``argparse`` options of ``mlflow-mia audit | compare | ner-audit | analyze``
  (:func:`add_arguments`; :func:`mlflow_mia.entrypoints.common.flat_from_args` reads them back as flat keys);
- the ``evaluator_config["mia"]`` keys of the methods ``mia`` and ``ner_prompts``, read by
  :func:`parse_values` (an unknown key is an error that lists the valid ones; a bad value
  an error naming the key and the expected form);
- the key tables of the evaluator docstrings (:func:`key_table`);
- the MLproject parameters of each entry point (:func:`mlproject_parameters`; ``MLproject``
  and ``docs/reference/options.md`` are written from them by :mod:`mlflow_mia.options.generate`).

Which commands and methods take an option is its ``used_by``; an option declared on a
config of one audit is used by that audit's command(s) and evaluator method (:data:`FAMILIES`,
the registry of :mod:`mlflow_mia.options.families`, which each audit fills; an audit kind registered
with its own command also takes the common options and the command options it needs). A setting several audits share (the signal,
the metrics, the seed, the reference model) is declared once and held by the other audits'
configs with :func:`~mlflow_mia.option.shared_option`: one declaration, a default per audit.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Any, Mapping

from mlflow_mia.option import OptionField, coerce, declared_options, is_unset, option, same_option_fields
from mlflow_mia.options.families import (COMMANDS, FAMILIES, GENERIC_COMMAND_OPTIONS, METHODS, audit_commands,
                                         audit_methods, register_family, surface_order)
from mlflow_mia.hashing import HashKey, resolve_hash_key
from mlflow_mia.naming import did_you_mean
from mlflow_mia.options.helptext import default_text, full_help, help_text, render_default
from mlflow_mia.signals.cache import check_cache_dir
from mlflow_mia.signals.placement import check_device_map
from mlflow_mia.signals.runtime import resolve_device

__all__ = ["options_for", "parse_values", "build", "add_arguments", "key_table", "dest"]

_AUDITS = frozenset({"audit", "compare", "ner-audit", "canary-audit", *METHODS})
_WITH_ANALYZE = _AUDITS | {"analyze"}


def _hash_key(value):
    """A :class:`~mlflow_mia.hashing.HashKey` from a key file path (or one already read)."""
    return value if isinstance(value, HashKey) else resolve_hash_key(str(value).strip())


def _device(value) -> str:
    """The device string, checked to exist on this machine (before any model loads)."""
    device = str(value).strip()
    resolve_device(device)
    return device


def _cache_dir(value) -> str:
    """A cache folder path, checked to be (or to be creatable as) a folder this user can write."""
    return check_cache_dir(str(value).strip())


def _prefix(value) -> str:
    """A metric / artifact name prefix: name characters only, no absolute path, no ``..`` segment."""
    prefix = str(value or "")
    if prefix and (not re.fullmatch(r"[\w.\-/ ]+", prefix) or prefix.startswith("/")
                   or any(part in (".", "..") for part in prefix.split("/"))):
        raise ValueError(f"metric_prefix {prefix!r} may only hold letters, digits and _ - . / or spaces, may not "
                         "start with '/' and may not hold a '.' or '..' path segment (it prefixes artifact paths)")
    return prefix


@dataclass(frozen=True)
class CommonOptions:
    """Options both audits (membership inference and NER prompts) take: inputs, logging, running.

    Subclassed by :class:`~mlflow_mia.options.audit.MiaOptions` and
    :class:`~mlflow_mia.options.ner.NerOptions`; the help of each field
    is its documentation.
    """

    method: str = option("mia", "which audit: mia (membership inference), ner_prompts (NER prompt "
                         "memorization, Xia et al. 2025) or canaries (planted canaries: exposure and the one-run "
                         "epsilon bound)", choices=METHODS, used_by=frozenset(METHODS), cli=False)
    target_model: Any = option(None, "URI of the model to audit when mlflow.models.evaluate(model=None, ...) is "
                               "used (loaded by the audit's own loader, so no model code runs)",
                               used_by=frozenset(METHODS), cli=False)
    base_model: str | None = option(None, "the base model of a target given as a local PEFT adapter folder "
                                    "(adapter_config.json): a folder or MLflow model URI; a registered adapter "
                                    "carries its base, and an adapter records its own when that is a local folder",
                                    used_by=frozenset({"audit", "canary-audit", "mia", "canaries"}),
                                    metavar="URI", default_doc="the adapter's base_model_name_or_path when local")
    label_column: str | None = option(None, "membership label column, 1 = member (in the training data), "
                                      "0 = not", used_by=_AUDITS, metavar="NAME",
                                      default_doc="the targets argument of mlflow.models.evaluate, else is_member")
    log_texts: bool = option(False, "write raw texts (names, for NER) and the sample ids as given into the logged "
                             "tables; else only keyed hashes of texts, ids and groups", used_by=_AUDITS)
    log_samples: bool = option(False, "log per-sample scores, flags and token counts (per-name confidences, for "
                               "NER) beside the labels; else the tables hold only ids, keyed hashes and labels: "
                               "anyone who can read the run and load the target could recompute a text's score "
                               "and find its label there", used_by=_AUDITS,
                               short="log per-sample scores, flags and token counts beside the labels (anyone who "
                                     "can read the run could then find a text's label)")
    hash_key: Any = option(None, "file holding your secret key (32+ bytes) of the HMAC-SHA256 text, group and "
                           "name hashes in the logged tables; never logged (see mlflow_mia.lookup_hash)",
                           key="hash_key_file", parse=_hash_key, used_by=_WITH_ANALYZE | {"train-shadows"}, metavar="PATH", repr=False,
                           default_doc="$MLFLOW_MIA_HASH_KEY, else a random key that is not kept")
    metric_prefix: str = option("", "prefix of metric, parameter and artifact names", parse=_prefix,
                                used_by=frozenset(METHODS), cli=False)
    cache_dir: str | None = option(None, "cache directory of the computed signals (confidences, for NER); "
                                   "re-runs and shared references cost nothing; a folder (created when missing)",
                                   parse=_cache_dir, used_by=_WITH_ANALYZE,
                                   metavar="DIR", default_doc="$MLFLOW_MIA_CACHE or ~/.cache/mlflow_mia")
    device: str | None = option(None, "torch device: cpu, cuda, cuda:<index> or mps; checked before any model "
                                "loads",
                                parse=_device, used_by=_WITH_ANALYZE, default_doc="CUDA when available")
    device_map: str | None = option(None, "'auto': spread a model too big for one device over every GPU, then CPU "
                                    "memory, then disk (accelerate's device_map; it runs in place)",
                                    parse=check_device_map, used_by=_WITH_ANALYZE, metavar="auto",
                                    default_doc="the whole model on the device")
    progress: bool = option(True, "show progress bars (the commands: only when stdout is a terminal)",
                            flags=("--no-progress",), invert=True, flag_help="no progress bars",
                            used_by=_WITH_ANALYZE | {"build-demo"}, mlproject=False)


@dataclass(frozen=True)
class CommandOptions:
    """Options of the ``mlflow-mia`` commands only (what to audit, where to log); no evaluator key."""

    target: str | None = option(None, "model under audit: models:/name/version, models:/name@alias, "
                                "runs:/<run_id>/<path> or a local folder; required with --data",
                                used_by=frozenset({"audit", "canary-audit"}), metavar="URI",
                                default_doc="the demo's models:/bbc-target@candidate")
    models: str | None = option(None, "registered model name(s) to compare, comma-separated; required with --data",
                                used_by=frozenset({"compare"}), metavar="NAME[,NAME]",
                                default_doc="the demo's bbc-target")
    aliases: str | None = option(None, "aliases to audit, e.g. champion,candidate", used_by=frozenset({"compare"}),
                                 metavar="A[,B]",
                                 default_doc="every version; on the demo, candidate,short (trained on first use)")
    data: str | None = option(None, "target pool (.csv, .jsonl, .json or .parquet): one text per row with a "
                              "membership label, 1 = in the target's training data, 0 = not",
                              used_by=frozenset({"audit", "compare"}), metavar="PATH",
                              default_doc="the BBC News demo's pool, built on first use, with its population, "
                                          "reference and columns")
    model: str | None = option(None, "token-classification model: models:/name@alias, models:/name/version, "
                               "runs:/... or a folder", used_by=frozenset({"ner-audit"}), metavar="URI",
                               default_doc="the WNUT-16 demo's wnut-ner-a and wnut-ner-b")
    names: str | None = option(None, "names table (.csv/.jsonl/.parquet): name, entity_type, is_member "
                               "(1 = in the training data), optional split (dev/test)",
                               used_by=frozenset({"ner-audit"}), metavar="PATH", default_doc="the demo's")
    demo_size: str = option("default", "size of the built-in demo audited when no model or data is given: "
                            "small: 150 + 150 pool sentences, 300 population sentences and tiny models, for tests "
                            "and a first look", choices=("default", "small"),
                            used_by=frozenset({"audit", "compare", "ner-audit", "canary-audit"}))
    demo_kind: str = option("masked", "kind of the built-in BBC News demo audited when no model or data is given: "
                            "masked (BERT models), causal (GPT-2 models trained on the same member articles, "
                            "audited on the same pool; docs/guides/causal.md) or lora (a LoRA adapter fine-tuned "
                            "on the members over a causal base, audited against its base; docs/guides/lora.md)",
                            choices=("masked", "causal", "lora"),
                            short="kind of the built-in demo: masked (BERT), causal (GPT-2) or lora (a LoRA adapter "
                                  "over a causal base)",
                            used_by=frozenset({"audit"}))
    demo_shadows: int = option(0, "with the built-in demo: train K shadow models of the demo target with its "
                               "recipe on random halves (by article) of the pool, population and reference "
                               "articles (registered once, resumed), and audit with them as the references and "
                               "their record, so lira_online (online LiRA) runs and gates; an even K >= 4, "
                               "0 = none (docs/guides/reference-sets.md)", ge=0, metavar="K",
                               short="train K shadows of the demo target (even, >= 4) and audit with them: "
                                     "lira_online runs; 0 = none",
                               used_by=frozenset({"audit"}))
    quick: bool = option(False, "the quick size: the small demo and one seed, to try the command (it backs no "
                         "claim); else the full size: 3 seeds on the default demo", used_by=frozenset({"analyze"}))
    findings: str | None = option(None, "run only these findings, comma-separated", used_by=frozenset({"analyze"}),
                                  metavar="A[,B]", default_doc="all but canaries (it trains the canary demo)")
    experiment: str | None = option(None, "MLflow experiment (ignored under mlflow run)", metavar="NAME",
                                    used_by=frozenset({"audit", "compare", "ner-audit", "analyze", "canary-audit"}),
                                    mlproject=False, default_doc="$MLFLOW_EXPERIMENT_NAME, else mlflow-mia")
    run_name: str | None = option(None, "name of the MLflow run",
                                  used_by=frozenset({"audit", "compare", "analyze", "canary-audit"}),
                                  metavar="NAME", mlproject=False)
    quiet: bool = option(False, "no progress bars (one line per step instead), and the libraries' warnings and "
                         "progress output silenced (transformers, datasets, huggingface_hub, tqdm)",
                         flags=("-q", "--quiet"),
                         used_by=frozenset(COMMANDS))
    tracking_uri: str | None = option(None, "MLflow tracking URI", used_by=frozenset(COMMANDS), metavar="URI",
                                      mlproject=False, default_doc="$MLFLOW_TRACKING_URI, else sqlite:///mlflow.db")


#: ``--help`` groups, in this order, by the class that declares the option.
_TITLES = {"CommandOptions": "command", "MiaOptions": "data, models and release gate",
           "NerOptions": "prompts and release gate", "CanaryOptions": "canaries, models and release gate",
           "CanaryAuditConfig": "canary audit", "AuditConfig": "attacks", "SignalConfig": "signals",
           "NeighbourhoodConfig": "neighbourhood attack", "MetricConfig": "metrics", "NerAuditConfig": "NER audit",
           "CommonOptions": "logging and execution"}


#: The ``--help`` group of an attack's own settings (a class not in ``_TITLES``: an attack's ``Settings``).
_ATTACK_TITLE = _TITLES["AuditConfig"]


def help_title(e: "Entry") -> str:
    """An option's ``--help`` group: by declaring class; attack ``Settings`` in "attacks"; "<family> audit"."""
    name = e.field.owner.__name__
    if name in _TITLES:
        return _TITLES[name]
    family = FAMILIES.get(e.family)
    return f"{e.family} audit" if getattr(family, "command", None) else _ATTACK_TITLE


def help_rank(e: "Entry") -> float:
    """Where an option sorts in ``--help`` (and MLproject): by :func:`help_title`, an audit kind's own last."""
    order = list(_TITLES)
    name = e.field.owner.__name__
    if name in order:
        return order.index(name)
    return len(order) if help_title(e) != _ATTACK_TITLE else order.index("AuditConfig") + 0.5


@dataclass(frozen=True)
class Entry:
    """One declared option, the commands and methods that take it, and where it is parsed to.

    Attributes
    ----------
    field : OptionField
    used_by : frozenset of str
    family : str or None
        The family whose configs hold it (``"mia"``, ``"ner"``, ``"canary"``, an audit kind's own;
        ``"common"``: every audit, :class:`CommonOptions`);
        None for a command-only option (:class:`CommandOptions`), which has no evaluator key.
    """

    field: OptionField
    used_by: frozenset
    family: str | None

    @property
    def key(self) -> str:
        return self.field.key


def entries() -> list[Entry]:
    """Every option of every family, in declaration order.

    A field inherited by two classes counts once. A shared option
    (:func:`~mlflow_mia.option.shared_option`: one declaration composed into several
    audits' configs) gives one entry per family that holds it, each with that family's
    default and commands.
    """
    out, seen = [], set()
    generic = audit_commands() + audit_methods()
    for family, (classes, surfaces, *_) in FAMILIES.items():
        for cls in classes:
            for of in declared_options(cls).values():
                used_by = frozenset(of.option.used_by or surfaces)
                if of.owner is CommonOptions:  # an audit kind with its own command takes the common options too
                    used_by |= frozenset(generic if of.option.cli else audit_methods())
                ident = (id(of.option), repr(of.default), used_by)
                if ident in seen:
                    continue
                seen.add(ident)
                out.append(Entry(of, used_by, family if of.owner is not CommonOptions else "common"))
    for of in declared_options(CommandOptions).values():  # and the command options it needs
        commands = audit_commands() if of.key in GENERIC_COMMAND_OPTIONS else ()
        out.append(Entry(of, frozenset(of.option.used_by or ()) | frozenset(commands), None))
    return out


def options_for(surface: str) -> dict[str, Entry]:
    """The options a command (``audit``, ...) or evaluator method (``mia``, ``ner_prompts``) takes, by key.

    Raises
    ------
    ValueError
        Two declarations share a key on this surface (an option declared twice).
    """
    out = {}
    for e in entries():
        if surface in e.used_by:
            if e.key in out and out[e.key].field.option is e.field.option:
                raise ValueError(f"option {e.key!r} of {surface!r} has two defaults: {out[e.key].field.default!r} "
                                 f"on {out[e.key].field.owner.__name__} and {e.field.default!r} on "
                                 f"{e.field.owner.__name__}")
            if e.key in out:
                raise ValueError(f"option {e.key!r} of {surface!r} is declared twice: on "
                                 f"{out[e.key].field.owner.__name__} and {e.field.owner.__name__}")
            out[e.key] = e
    return out


def parse_values(method: str, config: Mapping[str, Any], *, what: str = "evaluator_config['mia']") -> dict:
    """Read a flat option dict: ``{key: value}`` for every key given (not None, not blank).

    Raises
    ------
    ValueError
        Unknown keys (the message lists the valid ones) or a value that does not fit
        its option (the message names the key and the expected form).
    """
    valid = options_for(method)
    unknown = sorted(set(config) - set(valid))
    if unknown:
        suffix = "" if method == "mia" else f" for method {method!r}"
        near = "".join(did_you_mean(k, valid, quote=lambda c: f'"{c}"').replace("; did you mean", f"; for {k!r} did "
                                                                                "you mean") for k in unknown)
        raise ValueError(f"unknown {what} key(s) {unknown}{suffix}{near}; valid keys are {sorted(valid)}")
    values = {}
    for key, raw in config.items():
        of = valid[key].field
        if key == "method" and raw == method:  # the method that reads it (an audit kind's own method too)
            values[key] = raw
            continue
        if not is_unset(of, raw):
            values[key] = coerce(of, raw)
    return values


def build(cls, values: Mapping[str, Any], **fixed):
    """An instance of the config dataclass ``cls`` from parsed values (its declared fields; others default)."""
    kwargs = {of.name: values[key] for key, of in declared_options(cls).items() if key in values}
    kwargs.update({name: values[key] for name, key in same_option_fields(cls).items() if key in values})
    kwargs.update(fixed)
    return cls(**kwargs)


def dest(e: Entry) -> str:
    """The ``argparse`` dest (and MLproject parameter name) of an option: its long flag without dashes."""
    flags = e.field.option.flags or ("--" + e.key.replace("_", "-"),)
    long = next(f for f in flags if f.startswith("--"))
    return long[2:].replace("-", "_")


def _flags(e: Entry) -> tuple:
    return e.field.option.flags or ("--" + e.key.replace("_", "-"),)


def _converter(e: Entry):
    """An argparse type: the option's own conversion and checks; blank (an unset MLproject parameter) is None."""
    of = e.field

    def convert(text: str):
        if is_unset(of, text):
            return None
        try:
            value = coerce(of, text)
        except (ValueError, FileNotFoundError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text if of.option.repeat else value

    convert.__name__ = of.key
    return convert


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """Add the options ``command`` takes to ``parser``, one argument group per declaring config.

    Options of a config family default to None ("not given": the library default or the
    demo's value applies); command-only options default to their declared default.
    """
    found = sorted((e for e in options_for(command).values() if e.field.option.cli), key=help_rank)
    groups: dict[str, Any] = {}
    for e in found:
        of, opt = e.field, e.field.option
        title = help_title(e)
        group = groups.get(title) or groups.setdefault(title, parser.add_argument_group(title))
        default = of.default if e.family is None else None
        kwargs = {"dest": dest(e), "help": help_text(e).replace("%", "%%")}
        if opt.invert:
            kwargs["help"] = (opt.flag_help or f"turn off: {opt.help}").replace("%", "%%")
            group.add_argument(*_flags(e), action="store_true", **kwargs)
            continue
        if of.is_bool:
            kwargs.update(nargs="?", const=True, metavar="BOOL")
        elif opt.repeat:
            kwargs.update(action="append")
        metavar = opt.metavar or ("{" + ",".join(opt.choices) + "}" if opt.choices else None)
        if metavar and not of.is_bool:
            kwargs["metavar"] = metavar
        group.add_argument(*_flags(e), type=_converter(e), default=default, **kwargs)


def key_table(method: str) -> str:
    """The reStructuredText table of the evaluator keys of ``method`` (``mia`` or ``ner_prompts``)."""
    rows = []
    for key, e in options_for(method).items():
        text = full_help(e)
        rows.append((f"``{key}``", text))
    width = max(len(k) for k, _ in rows)
    rule = "=" * width + "  " + "=" * 60
    lines = [rule, *(f"{k:<{width}}  {text}" for k, text in rows), rule]
    return "\n".join(lines)


def mlproject_parameters(command: str) -> dict[str, tuple[str, str]]:
    """``{parameter: (type, default)}`` the MLproject entry point of ``command`` must declare.

    Every option the command takes that is offered on the command line as a value
    (not a switch such as ``--quiet``) and to MLproject; the parameter is the flag's
    dest and goes to the command as ``--flag {parameter}``. Numbers with a default are
    ``float`` parameters (MLproject has no int type), the rest ``string``; an empty
    default means "not given".
    """
    out = {}
    for e in options_for(command).values():
        of, opt = e.field, e.field.option
        if not opt.cli or opt.invert or not opt.mlproject:
            continue
        numeric = of.base in (int, float) and of.default is not None
        default = "" if of.default is None else render_default(of.default)
        out[dest(e)] = ("float" if numeric else "string", default)
    return out


def flag_of(command: str, parameter: str) -> str:
    """The long flag of the option whose dest is ``parameter``."""
    for e in options_for(command).values():
        if dest(e) == parameter:
            return next(f for f in _flags(e) if f.startswith("--"))
    raise KeyError(parameter)
