"""The ``mlflow-mia`` command line: ``audit``, ``compare``, ``build-demo``, ``ner-audit``, ``analyze`` and
``canary-audit``.

Each subcommand's options are derived from the option declarations
(:mod:`mlflow_mia.options.schema`) and turned into the flat
``evaluator_config["mia"]`` keys (:mod:`mlflow_mia.options.audit`), so the CLI,
the MLproject entry points and the evaluator plugin share one schema, one parser and
one logging path.

Exit codes: 0 success (gate passed or no gate), 1 the audit broke (a bug or an
environment fault such as a tracking server that cannot be reached, or a full disk under the
signal cache: free space, the cache is kept), 2 a usage or
input error (bad option, missing column, missing population set), 3 the release gate did not pass: ``fail`` (a lower confidence
bound shows the model leaks more than its budget) or ``inconclusive`` (the audit shows
neither that the budget holds nor that it is exceeded), each with its own message; also 3 when the audited registry version was
deleted during the audit and a blocking verdict could not be recorded on it (2 when
the verdict was a pass or there was no gate).

Under ``mlflow run`` every failure exits with 1 (MLflow's own code for a failed run). The
command's code is kept in three places: a last stderr line (``mlflow-mia audit: exit code 2
(usage or input error); mlflow run reports every failure as exit code 1``), and the project
run, which ends FAILED with a name (``mlflow-mia audit failed (exit 2)``, unless the audit
had named it) and a description holding the error and the code.
"""

from __future__ import annotations

import importlib
import sys

from mlflow_mia.entrypoints.exits import EXIT_USAGE
from mlflow_mia.entrypoints.precheck import check_argv, under_mlflow_run

__all__ = ["main", "build_parser"]


def __getattr__(name: str):
    """Every other name of the commands (``build_parser``, ``generic_front_end``, ``EXIT_*``, ...) from
    :mod:`mlflow_mia.entrypoints.commands`, loaded on first use: ``mlflow-mia`` checks its input files first."""
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(importlib.import_module("mlflow_mia.entrypoints.commands"), name)


def dashed_flags(argv) -> list[str]:
    """``--text_column`` as ``--text-column``: how ``mlflow run`` passes a ``-P`` parameter the MLproject does not list.

    MLflow appends each undeclared parameter as ``--<name> <value>`` with the name as
    given (``-P text_column=body`` gives ``--text_column body``); the generated MLproject
    lists no parameter for an option without a default, so such options come this way.
    Only flag names change (``--a_b`` or ``--a_b=value``), never values.

    >>> dashed_flags(["audit", "--text_column", "body", "--data=a_b.csv", "a_b"])
    ['audit', '--text-column', 'body', '--data=a_b.csv', 'a_b']
    """
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        if name.startswith("--") and "_" in name and name[2:].replace("_", "").replace("-", "").isalnum():
            arg = name.replace("_", "-") + eq + value
        out.append(arg)
    return out


def main(argv=None) -> int:
    """Run ``mlflow-mia``; returns the exit code (0 ok, 1 audit broke, 2 usage or input error, 3 gate did not pass).

    The input files named by the arguments are checked first, before torch, transformers or MLflow load
    (:func:`~mlflow_mia.entrypoints.precheck.check_argv`: a missing ``--data`` file is reported in about a
    second, exit code 2); then :func:`mlflow_mia.entrypoints.commands.run_argv` parses and runs the command.
    Under ``mlflow run`` (``$MLFLOW_RUN_ID`` set) a non-zero exit also ends the project run
    FAILED with a name and a description holding the error and this exit code
    (:func:`~mlflow_mia.tracking.runs.record_project_failure`), and a last line on stderr gives
    the code: ``mlflow run`` itself exits with 1 for every failure.
    """
    argv = dashed_flags(sys.argv[1:] if argv is None else argv)
    problem = check_argv(argv)
    if problem is not None:
        command, message = problem
        print(f"mlflow-mia {command}: error: {message}", file=sys.stderr, flush=True)
        if under_mlflow_run():  # recorded on the project run (this loads MLflow: after the message)
            importlib.import_module("mlflow_mia.entrypoints.commands").project_failed(command, EXIT_USAGE, message)
        return EXIT_USAGE
    return importlib.import_module("mlflow_mia.entrypoints.commands").run_argv(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
