"""One shape for every audit kind: :class:`Audit`, the parts an entry point calls, and :class:`Settings`.

Each ``audits/<kind>/`` (membership, NER, canary) builds one :class:`Audit` from its
own functions: ``parse`` (flat options -> :class:`Settings`, before any model loads),
``load_inputs`` (a table -> what stage 1 reads, checked), ``resolve`` (a model URI ->
the loaded target), ``signals`` (stage 1, the only part that runs models) and
``score`` (stage 2, pure). Logging is one layer up: :mod:`mlflow_mia.pipeline`
registers each audit with its ``run`` (stage 1, stage 2, gate, log), ``log`` and
``metrics`` (:mod:`mlflow_mia.tracking`) in ``AUDITS``, the registry every entry point looks an
audit up in, as ``ATTACKS`` is for attacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from mlflow_mia.models import resolve as models_resolve

__all__ = ["Audit", "Settings", "resolve_target"]


class Settings(NamedTuple):
    """An audit's parsed settings: what it computes (``config``) and how it runs and logs (``options``).

    A tuple, so ``config, options = audit.parse(flat)`` reads as the parsers always did.

    Attributes
    ----------
    config : frozen dataclass
        ``AuditConfig``, ``NerAuditConfig`` or ``CanaryAuditConfig``: stored with the result.
    options : frozen dataclass
        ``MiaOptions``, ``NerOptions`` or ``CanaryOptions``: models, data, gate, logging, execution.
    """

    config: Any
    options: Any


@dataclass(frozen=True)
class Audit:
    """One audit kind: the parts every entry point (evaluator, CLI, MLproject) calls, in this order.

    Attributes
    ----------
    name : str
        The evaluator's ``method`` key (``"mia"``, ``"ner_prompts"``, ``"canaries"``): the registry key.
    command : str
        The ``mlflow-mia`` subcommand (``"audit"``, ``"ner-audit"``, ``"canary-audit"``); its flags are the
        declarations of :mod:`mlflow_mia.options.schema` for this command.
    help, description : str
        The subcommand's one-line help and its ``--help`` description.
    target_flag : str
        The CLI flag naming the model (``--target``, ``--model``), quoted in the evaluator's warnings.
    parse : callable
        ``parse(flat, *, targets=None) -> Settings``; ``targets`` is the label column
        ``mlflow.models.evaluate`` was given. Raises ValueError naming the bad key.
    load_inputs : callable
        ``load_inputs(frame, settings)``: the evaluator's ``data`` table -> what stage 1 reads
        (membership: ``(AuditDataset, PopulationSet)``; NER: the names table; canary: the
        ``CanarySet``). Raises ValueError before any model loads.
    resolve : callable
        ``resolve(model_or_uri, settings)``: the target, loaded by the audit's own loader.
    signals : callable
        Stage 1 (``compute_audit_signals``, ``ner_signals``, ``canary_signals``): the only part that runs models.
    score : callable
        Stage 2 (``score_audit``, ``score_ner``, ``score_canaries``): signals -> result, runs no model.
    run : callable, optional
        ``run(target, inputs, settings, *, run_id, log_metrics, notes) -> (result, artifacts)``: both
        stages, the gate and the log; set by :mod:`mlflow_mia.pipeline` at registration.
    log : callable, optional
        The tracking function that logs a result (:mod:`mlflow_mia.tracking`): ``log(result, run_id,
        settings=LogSettings)`` (the canary audit's set rides in ``LogSettings.canaries``); set at registration.
    metrics : callable, optional
        ``metrics(result, settings) -> dict``: the metrics logged to MLflow, which an ``EvaluationResult``
        returns; set at registration.
    """

    name: str
    command: str
    help: str
    description: str
    target_flag: str
    parse: Callable
    load_inputs: Callable
    resolve: Callable
    signals: Callable
    score: Callable
    run: Callable | None = None
    log: Callable | None = None
    metrics: Callable | None = None

    def __post_init__(self):
        if not self.name or not self.command.replace("-", "").isalnum():
            raise ValueError(f"an audit needs a name and a subcommand of letters, digits and '-' "
                             f"(got name={self.name!r}, command={self.command!r})")


def resolve_target(model, settings: Settings):
    """The target language model of an audit, loaded without running code shipped with it.

    A masked or a causal LM, whichever the artifact holds (:func:`~mlflow_mia.models.resolve.resolve_model`,
    looked up when called, so a test may replace it); code shipped with the model runs only with the
    options' ``trust_remote_code``. The ``resolve`` part of the membership and canary audits.

    Parameters
    ----------
    model : str, os.PathLike, PyFuncModel or MaskedLM
        A ``models:/`` or ``runs:/`` URI, a local folder, or a model MLflow already loaded.
    settings : Settings
        The audit's settings; ``settings.options.trust_remote_code`` is read.

    Returns
    -------
    ResolvedModel
        ``.lm`` the loaded model, with its version-pinned identity.

    Raises
    ------
    ValueError
        As :func:`~mlflow_mia.models.resolve.resolve_model` (no URI match, no language-model head, code shipped
        with the model and ``trust_remote_code`` off).
    """
    return models_resolve.resolve_model(model, role="target", trust_remote_code=settings.options.trust_remote_code,
                                        base_model=getattr(settings.options, "base_model", None))
