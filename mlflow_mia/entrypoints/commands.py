"""The ``mlflow-mia`` subcommands behind :mod:`mlflow_mia.entrypoints.cli`: the parser, each command and its run.

:mod:`~mlflow_mia.entrypoints.cli` checks the input files first (:mod:`~mlflow_mia.entrypoints.precheck`,
standard library only) and imports this module, which loads the option schema, torch and the
audits, only when they pass: :func:`run_argv` parses and runs a command; exit codes in
:mod:`~mlflow_mia.entrypoints.exits`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Callable, NamedTuple
import json

from mlflow_mia.options.schema import add_arguments, dest, options_for
from mlflow_mia.option import OptionError
from mlflow_mia.entrypoints.common import (EXIT_ERROR, EXIT_GATE_FAILED, EXIT_MEANINGS, EXIT_OK, EXIT_USAGE,
                                         audit_settings, build_demo_for_audit, flat_from_args, print_result,
                                         quiet_output)
from mlflow_mia.tracking.runs import mlflow_run
from mlflow_mia.tracking.runs import setup_tracking as _setup_tracking
from mlflow_mia.tracking.runs import use_experiment
from mlflow_mia.options.values import blank as _blank
from mlflow_mia.analyze import FINDINGS
from mlflow_mia.data import load_table
from mlflow_mia.demo.references import build_references
from mlflow_mia.entrypoints.analyze_cli import cmd_analyze
from mlflow_mia.entrypoints.canary_cli import cmd_canary_audit
from mlflow_mia.entrypoints.ner_cli import cmd_ner_audit
from mlflow_mia.models.resolve import resolve_model, resolve_reference
from mlflow_mia.pipeline import AUDITS
from mlflow_mia.pipeline.membership import audit_and_log
from mlflow_mia.signals.cache import CacheCorruptError, CacheDiskFullError
from mlflow_mia.signals.placement import loading
from mlflow_mia.tracking.registry_tags import VersionDeletedError
from mlflow_mia.tracking.runs import record_project_failure
from mlflow_mia.tracking.descriptions import audit_run_name, references_label
from mlflow_mia.tracking.verdict import audit_verdict, describe_nested
from mlflow_mia.entrypoints.shadows_cli import add_train_shadows_flags, cmd_train_shadows
from mlflow_mia.entrypoints.precheck import spell_flag
from mlflow_mia.naming import did_you_mean

__all__: list[str] = []

log = logging.getLogger(__name__)


class _Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose exit carries its message, so a usage error can be recorded too."""

    def exit(self, status=0, message=None):
        if message:
            self._print_message(message, sys.stderr)
        exc = SystemExit(status)
        exc.usage_message = message
        raise exc

_EPILOG = """\
examples:
  mlflow-mia audit --demo-size small
  mlflow-mia audit --target models:/bbc-target@candidate --reference models:/bbc-reference@champion \\
      --data pool.csv --population population.csv --group-column article_id --max-tpr-at-fpr 0.01:0.05
  mlflow-mia compare --models bbc-target --aliases champion,candidate --reference models:/bbc-reference@champion \\
      --data pool.csv --population population.csv
  mlflow-mia compare --reference models:/bbc-reference@champion,models:/bbc-reference-ood@champion \\
      --attacks loss,likelihood_ratio,neighbourhood --neighbour-generator models:/bbc-reference-ood@champion
  mlflow-mia compare --reference demo:oracle,demo:base,demo:shadows   # demo references; shadows built once

exit codes: 0 = done (gate passed or none set), 1 = the audit broke (a bug or an environment fault),
2 = usage or input error, 3 = release gate did not pass: fail (the model leaks more than its budget) or
inconclusive (the audit shows neither that the budget holds nor that it is exceeded; the message says
how many more members / non-members would resolve it), or a registry version deleted mid-audit kept a blocking
verdict from being recorded. Under mlflow run, which exits 1 for every failure, the last stderr line and the
failed run's description give this code.
"""


class Command(NamedTuple):
    """One ``mlflow-mia`` subcommand: its name, its help texts, what runs it, and flags not declared as options.

    Its declared options (:mod:`mlflow_mia.options.schema`, by ``name``) are added by :func:`add_command`.
    """

    name: str
    help: str
    description: str
    main: Callable[[argparse.Namespace], int]
    epilog: str | None = None
    add_flags: Callable[[argparse.ArgumentParser], None] | None = None


def _front_ends() -> dict:
    """The built-in audits' own command functions (they build their demo and print their tables), by ``AUDITS``
    name; every other registered audit runs :func:`generic_front_end`."""
    return {"mia": _cmd_audit, "ner_prompts": cmd_ner_audit, "canaries": cmd_canary_audit}


def generic_front_end(audit) -> Callable[[argparse.Namespace], int]:
    """The command of an audit kind without a front end of its own: the evaluator's path from the flags.

    ``--target`` and ``--data`` (the command options a family registered with its own ``command``
    takes, :data:`~mlflow_mia.options.families.GENERIC_COMMAND_OPTIONS`), then the audit's parts in
    the evaluator's order: ``parse`` (the flags as flat keys), ``load_inputs`` (the ``--data`` table),
    ``gate`` (its refusals before any model loads), ``resolve`` (the ``--target`` URI), ``run`` (both stages
    and the log, one MLflow run); the logged metrics are printed, one per line, then the gate's verdict
    (decided again on the result: ``check`` is pure); exit 3 when the gate did not pass.

    Raises
    ------
    ValueError
        ``--target`` or ``--data`` missing (exit code 2), or as the audit's parts.
    """

    def run(args: argparse.Namespace) -> int:
        target_uri, data = _blank(args.target), _blank(args.data)
        if target_uri is None or data is None:
            raise ValueError(f"{audit.command} needs --target (the model to audit) and --data (its input table)")
        settings = audit.parse(flat_from_args(args, args.command))
        inputs = audit.load_inputs(load_table(data), settings)
        budgets = audit.gate(settings, inputs)  # a budget the settings or inputs refuse: before the model loads
        target = audit.resolve(target_uri, settings)
        with mlflow_run(_blank(args.run_name) or f"{audit.command} {target_uri}") as active:
            result, _ = audit.run(target, inputs, settings, run_id=active.info.run_id, log_metrics=True, notes=[])
        print(f"{audit.command} of {target_uri} (run {active.info.run_id}):")
        for key, value in audit.metrics(result, settings).items():
            print(f"  {key:<40} {value:.6g}")
        verdict = budgets.check(result) if budgets is not None else None
        if verdict is not None:
            print(verdict.verdict())
        return EXIT_GATE_FAILED if verdict is not None and not verdict.passed else EXIT_OK

    return run


def _demo_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", choices=("default", "small"), default="default",
                   help="'small': 150 + 150 pool sentences, 300 population sentences and tiny models, for tests "
                        "and a first look (default: default)")
    p.add_argument("--force", action="store_true", help="retrain and register new versions even if present")
    p.add_argument("--data-dir", metavar="DIR",
                   help="folder for pool.jsonl and population.jsonl (default ./mlflow_mia_demo/<size>)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="torch CPU threads for training (default: torch's choice; 1 on busy machines)")
    p.add_argument("--references", action="store_true",
                   help="also train the 4 shadow references <prefix>shadow-0..3@champion (the base fine-tuned "
                        "on random halves of in-domain articles disjoint from the pool; compare --reference "
                        "demo:shadows builds them on first use too)")
    p.add_argument("--json", action="store_true", help="print the demo's models and files as JSON")


def commands() -> list[Command]:
    """Every subcommand: one per audit of :data:`mlflow_mia.pipeline.AUDITS` (its help from the ``Audit``),
    then ``compare``, ``build-demo`` and ``analyze``."""
    front_ends = _front_ends()
    audits = [Command(a.command, a.help, a.description, front_ends.get(name) or generic_front_end(a),
                      epilog=_EPILOG if name == "mia" else None) for name, a in AUDITS.items()]
    return audits + [
        Command("compare", "audit several registry versions against one reference and compare them",
                "Audit every version (or the given aliases) of one or more registered models against the same "
                "reference, one nested run per version, and log a comparison table (attack x model version) "
                "and plots to the parent run. The reference signals are computed once (signal cache).",
                _cmd_compare, epilog=_EPILOG),
        Command("build-demo", "train and register the BBC News demo models",
                "Build the real-data demo: BBC News sentences, a target model fine-tuned on "
                "the members, an oracle reference model (same base, recipe and distribution) "
                "on disjoint articles and the public base it started from; registered as "
                "bbc-target@candidate, bbc-reference@champion (oracle) and "
                "bbc-base@champion. Skips training when they are already registered.",
                _cmd_build_demo, add_flags=_demo_flags),
        _train_shadows_command(),
        Command("analyze", "reproduce the papers' findings on the BBC News demo (why it leaks, what lowers it)",
                "Train the demo target's variants (shorter training, a deeper model, names inserted, DP-SGD at "
                "epsilon 8 and 1), audit each against the references, and log one nested run per audit and a "
                "findings table (tables/findings.csv), plots and findings.md to the parent run. Resumes: "
                "finished runs and registered variants are found and skipped. Findings: "
                + ", ".join(f.name for f in FINDINGS) + ".", cmd_analyze),
    ]


def _train_shadows_command() -> Command:
    return Command("train-shadows", "train shadow models of your target with its recipe (online LiRA)",
                   "Train and register K shadow models with the target's recipe (a JSON file) on balanced random "
                   "halves of the candidate texts, with a keyed record of the texts each trained on (never the "
                   "texts); resumes after an interruption. Audit with the shadows as --reference and the record as "
                   "--shadow-record: lira_online (online LiRA) then runs.", cmd_train_shadows,
                   add_flags=add_train_shadows_flags)


def add_command(sub, command: Command) -> argparse.ArgumentParser:
    """Add one subcommand to an ``argparse`` subparsers object: its flags, then its declared options."""
    p = sub.add_parser(command.name, help=command.help, epilog=command.epilog, usage=f"%(prog)s [options]",
                       description=command.description + " Every option in full: docs/reference/options.md.",
                       formatter_class=(argparse.RawDescriptionHelpFormatter if command.epilog
                                        else argparse.HelpFormatter))
    if command.add_flags is not None:
        command.add_flags(p)
    add_arguments(p, command.name)
    p.set_defaults(main=command.main)
    return p


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``mlflow-mia`` (also used to render ``--help``): :func:`add_command` for each of
    :func:`commands`."""
    parser = _Parser(
        prog="mlflow-mia", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_EPILOG,
        description="Privacy audits of fine-tuned language models, logged to MLflow: membership inference "
                    "against masked and causal LMs (and LoRA adapters), prompt memorization in NER taggers, and "
                    "canaries planted in a fine-tuning job.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress messages (INFO level)")
    listed = commands()
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(c.name for c in listed) + "}")
    sub.required = True
    for command in listed:
        add_command(sub, command)
    parser.commands = sub.choices  # each command's parser, for the flags it takes (unknown_flags)
    return parser


def unknown_flags(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """The usage error for arguments ``command``'s parser does not take, with the close flags it does take.

    ``unrecognized arguments: --grup-column x; for --grup-column did you mean --group-column?``; under
    ``mlflow run`` the flags are spelled as its parameters (``-P grup_column=``,
    :func:`~mlflow_mia.entrypoints.precheck.spell_flag`).
    """
    flags = [f for a in parser._actions for f in a.option_strings if f.startswith("--")]
    near = []
    for arg in extras:
        flag = arg.partition("=")[0]
        if flag.startswith("--"):
            close = did_you_mean(flag, flags, quote=spell_flag)
            near.append(close.replace("; did you mean", f"; for {spell_flag(flag)} did you mean"))
    return f"unrecognized arguments: {' '.join(extras)}" + "".join(near)


def _cmd_audit(args) -> int:
    import mlflow

    target_uri, data, demo = _blank(args.target), _blank(args.data), None
    if data is None:  # the demo's data (and models, unless given)
        demo = build_demo_for_audit(args.demo_size, progress=not args.no_progress, experiment=args.experiment,
                                    kind=getattr(args, "demo_kind", "masked"))
        target_uri, data = target_uri or demo.target_uri, str(demo.pool_path)
    elif target_uri is None:
        raise ValueError("--data was given without --target: name the model to audit")
    config, options, pool, population = audit_settings(args, data=data, demo=demo, target_uri=target_uri)
    target = resolve_model(target_uri, role="target", trust_remote_code=options.trust_remote_code,
                           base_model=options.base_model)
    sets = [[resolve_reference(uri, target=target, trust_remote_code=options.trust_remote_code) for uri in refs]
            for refs in options.reference_sets]
    params = {"pool_source": os.path.basename(str(data)),
              "population_source": os.path.basename(str(options.population_data))}
    sources = {"pool": os.path.basename(str(data))}
    if isinstance(options.population_data, (str, os.PathLike)):
        sources["population"] = os.path.basename(str(options.population_data))
    if len(sets) == 1:
        name = _blank(args.run_name) or audit_run_name(target.resolved_uri, references_label(sets[0]))
        with mlflow_run(name) as run:
            result, gate, _ = audit_and_log(target, pool, population, config, options, references=sets[0],
                                            run_id=run.info.run_id, extra_params=params, run_name=name,
                                            sources=sources)
        _print_audit(target, sets[0], result, run, gate)
        return EXIT_GATE_FAILED if gate is not None and not gate.passed else EXIT_OK  # fail or inconclusive
    blocked = False  # --reference-mode each: one nested run per reference
    name = _blank(args.run_name) or audit_run_name(target.resolved_uri, f"{len(sets)} references, each")
    with mlflow_run(name) as parent:
        verdicts = []
        for refs in sets:
            child = audit_run_name(target.resolved_uri, references_label(refs))
            with mlflow_run(child, nested=True) as run:
                result, gate, _ = audit_and_log(target, pool, population, config, options, references=refs,
                                                run_id=run.info.run_id, extra_params=params, run_name=child,
                                                sources=sources)
            _print_audit(target, refs, result, run, gate)
            verdicts.append((child, audit_verdict(result, gate)))
            blocked |= gate is not None and not gate.passed
        verdict = describe_nested(mlflow.MlflowClient(), parent.info.run_id, verdicts, name=name,
                                  heading="One nested run per reference:")
    print(verdict.line())
    return EXIT_GATE_FAILED if blocked else EXIT_OK


def _print_audit(target, references, result, run, gate) -> None:
    against = ", ".join(r.resolved_uri for r in references)
    print(f"audit of {target.resolved_uri}" + (f" against {against}" if references else ""))
    print_result(result, run, gate)


def _cmd_compare(args) -> int:
    from mlflow_mia.entrypoints.compare import compare

    return EXIT_OK if compare(args) else EXIT_GATE_FAILED


def _cmd_build_demo(args) -> int:
    import mlflow

    uri = _blank(args.tracking_uri)
    if uri:
        mlflow.set_tracking_uri(uri)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    use_experiment()  # mlflow-mia, opened as a model-training experiment by the UI
    spec = build_demo_for_audit(args.size, progress=not args.no_progress, force=args.force, isolate=False,
                                data_dir=_blank(args.data_dir), num_threads=args.threads)
    out = spec.to_dict()
    if args.references:
        out["shadow_uris"] = list(build_references(size=args.size, progress=not args.quiet,
                                                   data_dir=_blank(args.data_dir),
                                                   num_threads=args.threads).shadow_uris)
    if args.json:
        print(json.dumps(out, indent=2))
        return EXIT_OK
    print(f"demo ({args.size}) ready at {mlflow.get_tracking_uri()}:")
    for field in ("target_uri", "reference_uri", "ood_reference_uri", "base_uri", "shadow_uris", "pool_path",
                  "population_path"):
        if field in out:
            print(f"  {field:<18} {out[field]}")
    return EXIT_OK


def run_argv(argv) -> int:
    """Parse and run ``mlflow-mia`` with ``argv`` (flags dashed: :func:`~mlflow_mia.entrypoints.cli.dashed_flags`);
    returns the exit code (0 ok, 1 audit broke, 2 usage or input error, 3 gate did not pass).

    Under ``mlflow run`` (``$MLFLOW_RUN_ID`` set) a non-zero exit also ends the project run
    FAILED with a name and a description holding the error and this exit code
    (:func:`~mlflow_mia.tracking.runs.record_project_failure`), and a last line on stderr gives
    the code: ``mlflow run`` itself exits with 1 for every failure.
    """
    parser = build_parser()
    try:
        args, extras = parser.parse_known_args(argv)
        if extras:  # argparse's own error, with the close flags of this command
            parser.commands[args.command].error(unknown_flags(parser.commands[args.command], extras))
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        code = int(exc.code or 0)
        message = (getattr(exc, "usage_message", None) or "").strip()
        command = next((a for a in argv if not a.startswith("-")), None)
        project_failed(command or "(no command)", code, message)
        return code
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with quiet_output(getattr(args, "quiet", False)) as bars_off:  # bars only on a terminal; -q silences libraries
        if bars_off:
            args.no_progress = True  # the progress option every command reads
        try:
            code, message = _run(args)
        except Exception as exc:  # 1, with Python's traceback: recorded first under mlflow run
            project_failed(args.command, EXIT_ERROR, f"{type(exc).__name__}: {exc}")
            raise
    project_failed(args.command, code, message)
    return code


def project_failed(command: str, code: int, message: str | None) -> None:
    """Under ``mlflow run``, a non-zero exit: record it on the project run and say the code on stderr."""
    if not code or not os.environ.get("MLFLOW_RUN_ID"):
        return
    meaning = EXIT_MEANINGS.get(code, "failed")
    record_project_failure(command, code, message, meaning=meaning)
    print(f"mlflow-mia {command}: exit code {code} ({meaning}); mlflow run reports every failure as exit code 1",
          file=sys.stderr)


def _error(args, code: int, message: str) -> tuple[int, str]:
    """Print ``message`` as the command's error; ``(code, message)``."""
    print(f"mlflow-mia {args.command}: error: {message}", file=sys.stderr)
    return code, message


def _run(args) -> tuple[int, str | None]:
    """The parsed command: its exit code (see the module docstring) and the error it printed (None when none)."""
    import mlflow

    try:
        with loading(getattr(args, "device_map", None) or None):  # every model the command loads
            return _command(args), None
    except VersionDeletedError as exc:  # 3: a blocking verdict could not be recorded on the version
        return _error(args, EXIT_GATE_FAILED if exc.blocks else EXIT_USAGE, str(exc))
    except CacheDiskFullError as exc:  # 1: an environment fault (free space), never a damaged cache to delete
        return _error(args, EXIT_ERROR, str(exc))
    except ImportError as exc:  # 1: a package of an extra is missing; our message says what to install
        if "pip install" not in str(exc):
            raise
        return _error(args, EXIT_ERROR, str(exc))
    except (ValueError, FileNotFoundError, CacheCorruptError) as exc:
        return _error(args, EXIT_USAGE, spelled_for(exc, args.command))
    except mlflow.exceptions.MlflowException as exc:
        from mlflow_mia.models.files import tracking_unreachable

        if tracking_unreachable(exc):  # the server is down: an environment fault, not the user's input
            return _error(args, EXIT_ERROR, f"the tracking server at {mlflow.get_tracking_uri()} cannot be reached "
                                            f"({exc.message}); start it or check --tracking-uri")
        return _error(args, EXIT_USAGE, exc.message)


def spelled_for(exc: Exception, command: str) -> str:
    """The error's message with its option spelled as ``command`` takes it (``--group-column``; ``-P group_column=``
    under ``mlflow run``) when it is an :class:`~mlflow_mia.option.OptionError` of an option the command has."""
    entry = options_for(command).get(exc.key) if isinstance(exc, OptionError) else None
    if entry is None:
        return str(exc)
    return exc.spelled(spell_flag("--" + dest(entry).replace("_", "-")))


def _command(args) -> int:
    """Run the parsed command; its exit code when it returns."""
    if args.command != "build-demo":
        _setup_tracking(getattr(args, "tracking_uri", None), getattr(args, "experiment", None))
    return args.main(args)


