"""One shape for every audit kind: :class:`Audit`, the parts an entry point calls, and :class:`Settings`.

Each ``audits/<kind>/`` (membership, NER, canary) builds one :class:`Audit` from its
own functions: ``parse`` (flat options -> :class:`Settings`, before any model loads),
``load_inputs`` (a table -> what stage 1 reads, checked), ``resolve`` (a model URI ->
the loaded target), ``signals`` (stage 1, the only part that runs models) and
``score`` (stage 2, pure) and ``gate`` (its release gate from the settings and inputs, built before
any model loads, decided on stage 2's result). An :class:`Audit` is generic in its settings, inputs, signals
and result (``Audit[SettingsT, InputsT, SignalsT, ResultT]``, inferred from its parts), so
a type checker (``mypy``, configured in ``pyproject.toml``) sees that ``load_inputs``
takes what ``parse`` returns and ``score`` what ``signals`` returns. Logging is one layer
up: :mod:`mlflow_mia.pipeline` registers each audit with its ``run`` (stage 1, stage 2,
gate, log), ``log`` and ``metrics`` (:mod:`mlflow_mia.tracking`) as a
:class:`~mlflow_mia.pipeline.LoggedAudit` in ``AUDITS``, the registry every entry point
looks an audit up in, as ``ATTACKS`` is for attacks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, Protocol, TypeVar

from typing_extensions import NamedTuple  # generic NamedTuple before Python 3.11

from mlflow_mia.metrics.verdicts import ReleaseGate
from mlflow_mia.models import resolve as models_resolve
from mlflow_mia.models.resolve import ResolvedModel

__all__ = ["Audit", "Settings", "resolve_target"]

ConfigT = TypeVar("ConfigT")
OptionsT = TypeVar("OptionsT")
SettingsT = TypeVar("SettingsT", bound="Settings[Any, Any]")
SettingsT_co = TypeVar("SettingsT_co", bound="Settings[Any, Any]", covariant=True)
InputsT = TypeVar("InputsT")
SignalsT = TypeVar("SignalsT")
ResultT = TypeVar("ResultT")


class Settings(NamedTuple, Generic[ConfigT, OptionsT]):
    """An audit's parsed settings: what it computes (``config``) and how it runs and logs (``options``).

    A tuple, so ``config, options = audit.parse(flat)`` reads as the parsers always did; generic, so
    ``Settings[AuditConfig, MiaOptions]`` names what each part holds.

    Attributes
    ----------
    config : ConfigT (frozen dataclass)
        ``AuditConfig``, ``NerAuditConfig`` or ``CanaryAuditConfig``: stored with the result.
    options : OptionsT (frozen dataclass)
        ``MiaOptions``, ``NerOptions`` or ``CanaryOptions``: models, data, gate, logging, execution.
    """

    config: ConfigT
    options: OptionsT


class Parse(Protocol[SettingsT_co]):
    """An audit's parser: ``parse(flat, *, targets=None) -> Settings``, called before any model loads."""

    def __call__(self, flat: Mapping[str, Any] | None, /, *, targets: str | None = None) -> SettingsT_co:
        """The settings from flat ``evaluator_config["mia"]`` keys (or the subcommand's flags as such keys).

        ``targets`` is the label column ``mlflow.models.evaluate`` was given (None from the CLI).
        Raises ValueError naming the bad key.
        """
        ...


@dataclass(frozen=True)
class Audit(Generic[SettingsT, InputsT, SignalsT, ResultT]):
    """One audit kind: the parts every entry point (evaluator, CLI, MLproject) calls, in this order.

    Every field is required: an ``Audit`` is complete where it is built (its ``kind.py``). The type
    parameters are inferred from the parts: ``SettingsT`` from ``parse``, ``InputsT`` from
    ``load_inputs``, ``SignalsT`` from ``signals`` (and ``score``'s first parameter), ``ResultT``
    from ``score``.

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
    parse : Parse[SettingsT]
        ``parse(flat, *, targets=None) -> SettingsT``; ``targets`` is the label column
        ``mlflow.models.evaluate`` was given. Raises ValueError naming the bad key.
    load_inputs : callable
        ``load_inputs(frame, settings) -> InputsT``: the evaluator's ``data`` table -> what stage 1 reads
        (membership: ``(AuditDataset, PopulationSet)``; NER: the names table; canary: the
        ``CanarySet``). Raises ValueError before any model loads.
    resolve : callable
        ``resolve(model_or_uri, settings) -> ResolvedModel``: the target, loaded by the audit's own loader.
    signals : callable
        Stage 1 (``compute_audit_signals``, ``ner_signals``, ``canary_signals``) ``-> SignalsT``: the only part
        that runs models. Its parameters are the kind's own (the kind's ``run`` calls it).
    score : callable
        Stage 2 (``score_audit``, ``score_ner``, ``score_canaries``): ``score(signals, ...) -> ResultT``, runs no
        model; its first parameter takes stage 1's ``SignalsT``.
    gate : callable
        ``gate(settings, inputs) -> ReleaseGate | None``: the kind's release gate
        (:class:`~mlflow_mia.metrics.verdicts.ReleaseGate`: ``check(result) -> ThreeStateResult``), None
        when the settings set no budget. Every front end calls it right after ``load_inputs`` and before
        ``resolve``, so a budget the settings or inputs refuse (a seeded canary set, a loose budget) is
        refused before any model loads; the kind's ``run`` calls it again and decides it on the result.
        The verdict reaches the registry through
        :func:`~mlflow_mia.tracking.version_verdict.record_verdict`, the one writer of every kind.

    Raises
    ------
    ValueError
        An empty ``name``, or a ``command`` of other characters than letters, digits and ``-``.
    """

    name: str
    command: str
    help: str
    description: str
    target_flag: str
    parse: Parse[SettingsT]
    load_inputs: Callable[[Any, SettingsT], InputsT]
    resolve: Callable[[Any, SettingsT], ResolvedModel]
    signals: Callable[..., SignalsT]
    score: Callable[Concatenate[SignalsT, ...], ResultT]
    gate: Callable[[SettingsT, InputsT], ReleaseGate | None]

    def __post_init__(self) -> None:
        if not self.name or not self.command.replace("-", "").isalnum():
            raise ValueError(f"an audit needs a name and a subcommand of letters, digits and '-' "
                             f"(got name={self.name!r}, command={self.command!r})")


def resolve_target(model: Any, settings: Settings[Any, Any]) -> ResolvedModel:
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
