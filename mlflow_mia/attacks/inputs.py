"""The inputs attacks read, each declared once.

An :class:`AttackInput` is the one declaration of an input: its name (the key in
an attack's ``requires``, an attribute of :class:`AttackInputs`, a key of
:class:`~mlflow_mia.audits.membership.AuditSignals`), what one row of it holds, the model roles
stage 1 needs to compute it, how a user provides it, and the stage-1 function that
computes it. :class:`AttackInputs`, the validation of ``AuditSignals``,
:func:`~mlflow_mia.attacks.required_inputs`, :func:`~mlflow_mia.attacks.required_roles`,
the missing-input errors and :func:`~mlflow_mia.audits.membership.compute_audit_signals` all read
:data:`INPUTS`: a new input is one :func:`declare_input` call plus its computation.

Declared here: ``target`` and ``reference`` (the signals of one model, Mireshghallah
et al. 2022, Eq. 2 or appendix A.3.2), ``neighbour_values`` (the mean signal value of
a text's neighbours, Mattern et al. 2023, Eq. 3), ``neighbour_local`` (the
neighbour difference at the swapped tokens, :mod:`mlflow_mia.signals.neighbour_local`)
and ``references`` (the signals of every reference model of the audit's reference
set, :class:`ReferenceSignals`: the input of the attacks over several references), and
``shadow_membership`` (which of those models, shadow models with keyed training records,
trained on each text: the input of online LiRA).

The model role ``reference`` stands for the audit's reference set: one model or
several. The first is the role ``reference`` itself (the ``reference`` input, what
``likelihood_ratio`` reads); the i-th (i >= 2) is ``reference_<i>``
(:func:`reference_roles`), the name it has in ``audit_config.json``, in the run's
params and in the metrics of ``likelihood_ratio`` against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Mapping

import numpy as np

from mlflow_mia.attacks.shadow_record import stage_membership
from mlflow_mia.signals.neighbours import HOW_TO_GIVE_A_GENERATOR
from mlflow_mia.signals.types import SignalResult
from mlflow_mia.signals.dispatch import compute_signals
from mlflow_mia.signals.neighbour_local import local_scores

__all__ = ["AttackInput", "AttackInputs", "ReferenceSignals", "StageOne", "INPUTS", "MODEL_ROLES", "declare_input",
           "input_spec", "reference_roles"]

#: What one row of an input holds, by ``AttackInput.rows``.
ROW_KINDS = {
    "signal": "the signals of one model: a SignalResult (values, token log-probs, token counts)",
    "values": "one number per row: an ndarray of shape (n_rows,), float64, NaN where a row has no value",
    "signals": "the signals of every model of a role's set: a ReferenceSignals (one SignalResult per model)",
    "membership": ("which models of a role's set trained on each row: a bool ndarray of shape (n_rows, k), "
                   "column j the set's j-th model"),
}

#: The model roles of an audit and what an attack needing a missing one is told.
MODEL_ROLES = {
    "target": "the target model: pass target=...",
    "reference": ("a reference model trained on similar but disjoint data; pass references=[model] (one or "
                  "several), or drop them, e.g. attacks=['loss']"),
    "generator": "a generator masked LM to propose neighbours; " + HOW_TO_GIVE_A_GENERATOR,
}

#: Optional per-token quantities of a model's signals, computed in stage 1 only for an attack that declares it
#: (``Attack.token_quantities``); the log-probs themselves come with every signal.
TOKEN_QUANTITIES = {
    "token_stats": "Min-K%++'s mu and sigma of log p under the model's own distribution at each scored position "
                   "(nats; SignalResult.token_mu, token_sigma) and whether the scored token is its top-1 prediction "
                   "(SignalResult.token_top1, EZ-MIA's error positions); one more pair of sums and a running argmax "
                   "over the vocabulary head",
}


def reference_roles(k: int) -> tuple[str, ...]:
    """The role names of a reference set of ``k`` models: ``reference``, then ``reference_2`` ... ``reference_<k>``.

    >>> reference_roles(3)
    ('reference', 'reference_2', 'reference_3')
    """
    return tuple("reference" if i == 1 else f"reference_{i}" for i in range(1, int(k) + 1))


@dataclass(frozen=True)
class ReferenceSignals:
    """The signals of every model of an audit's reference set, each row-aligned with the same texts.

    Attributes
    ----------
    signals : tuple of SignalResult, length k >= 1
        One per reference model, in the order the references were given; every one
        has n_rows rows (row i of each is the same text).
    roles : tuple of str, length k
        Each model's role name (:func:`reference_roles`: ``reference``, ``reference_2``, ...).

    Raises
    ------
    ValueError
        No signals, rows that do not pair up, signals of different kinds, or roles of another length.
    TypeError
        An entry that is not a SignalResult.

    Examples
    --------
    >>> a = SignalResult.from_arrays([1.0, 2.0], n_tokens=[3, 4])
    >>> b = SignalResult.from_arrays([3.0, 5.0], n_tokens=[3, 4])
    >>> refs = ReferenceSignals((a, b))
    >>> refs.roles, refs.values.tolist(), len(refs.take([1]))
    (('reference', 'reference_2'), [[1.0, 2.0], [3.0, 5.0]], 1)
    """

    signals: tuple
    roles: tuple = ()

    def __post_init__(self):
        signals = tuple(self.signals)
        if not signals:
            raise ValueError("a reference set needs at least one reference model's signals")
        for s in signals:
            if not isinstance(s, SignalResult):
                raise TypeError(f"every reference's signals must be a SignalResult, got {type(s).__name__}")
        rows = {len(s) for s in signals}
        if len(rows) > 1:
            raise ValueError(f"the reference models' signals have different numbers of rows {sorted(rows)}: each "
                             "must have one row per text, in the same order")
        kinds = {s.kind for s in signals}
        if len(kinds) > 1:
            raise ValueError(f"the reference models' signals are of different kinds {sorted(kinds)}; compute them "
                             "all with the audit's SignalConfig")
        roles = tuple(self.roles) or reference_roles(len(signals))
        if len(roles) != len(signals):
            raise ValueError(f"{len(roles)} role names for {len(signals)} reference models")
        object.__setattr__(self, "signals", signals)
        object.__setattr__(self, "roles", roles)

    def __len__(self) -> int:
        return len(self.signals[0])

    @property
    def k(self) -> int:
        """The number of reference models."""
        return len(self.signals)

    @property
    def values(self) -> np.ndarray:
        """Each reference's signal values: shape (k, n_rows), float64 (energy in nats or PLL in nats/token)."""
        return np.stack([s.values for s in self.signals])

    def take(self, index) -> "ReferenceSignals":
        """Rows ``index`` (int array) of every reference, kept aligned."""
        return ReferenceSignals(tuple(s.take(index) for s in self.signals), self.roles)


@dataclass(frozen=True)
class StageOne:
    """What a stage-1 compute function reads (built by :func:`mlflow_mia.audits.membership.signals.stage_one`).

    Attributes
    ----------
    models : AuditModels
        The models by role (``target``, ``reference``, ``generator``).
    texts : list of str
        The pool texts, then the population texts.
    config : AuditConfig
    cache : SignalCache or None
    device : str or None
    progress : bool
    neighbours : NeighbourRecipe or None
        The audit's neighbour recipe (:mod:`mlflow_mia.signals.neighbour_recipe`) when an
        input needs the generator: every consumer reads the same neighbours.
    computed : dict
        The inputs computed so far in this stage, by name (``references`` reuses the
        ``reference`` signals for the first reference model instead of computing them again).
    token_quantities : dict
        ``{input: (quantity, ...)}``: the optional per-token quantities the audit's attacks
        declare (:func:`mlflow_mia.attacks.base.required_token_quantities`); absent: none.
    n_pool : int or None
        How many of ``texts`` are pool texts (the population texts follow); None: not known
        (an input that needs the population, e.g. ReCaLL's prefix, then refuses).
    engine : engine object running each model's signals (``engine.model_signals``), or None (here)
    """

    models: Any
    texts: list
    config: Any
    cache: Any = None
    device: Any = None
    progress: bool = True
    neighbours: Any = None
    computed: dict = field(default_factory=dict)
    token_quantities: dict = field(default_factory=dict)
    n_pool: int | None = None
    engine: Any = None


@dataclass(frozen=True)
class AttackInput:
    """The declaration of one attack input.

    Attributes
    ----------
    name : str
        The key in ``Attack.requires``, ``AttackInputs`` and ``AuditSignals``.
    rows : {"signal", "values", "signals", "membership"}
        What one row holds (:data:`ROW_KINDS`). A ``"signal"`` input is the signals
        of its single model role, which any engine computes (e.g. on Spark).
    roles : tuple of str
        The model roles (:data:`MODEL_ROLES`) stage 1 needs to compute it.
    how_to_provide : str
        The end of the error raised when an attack lacks it.
    compute : callable
        ``compute(stage: StageOne) -> SignalResult or ndarray`` over ``stage.texts``.
    description : str
        What the input holds, with units.

    Raises
    ------
    ValueError
        An unknown row kind or role, or a ``"signal"`` input with other than one role.
    """

    name: str
    rows: str
    roles: tuple[str, ...]
    how_to_provide: str
    compute: Callable[[StageOne], Any]
    description: str = ""

    def __post_init__(self):
        object.__setattr__(self, "roles", tuple(self.roles))
        if self.rows not in ROW_KINDS:
            raise ValueError(f"input {self.name!r}: rows must be one of {sorted(ROW_KINDS)}, got {self.rows!r}")
        unknown = [r for r in self.roles if r not in MODEL_ROLES]
        if unknown:
            raise ValueError(f"input {self.name!r}: unknown model role(s) {unknown}; roles are {list(MODEL_ROLES)}")
        if self.rows in ("signal", "signals") and len(self.roles) != 1:
            raise ValueError(f"input {self.name!r}: a {self.rows!r} input is the signals of one model role, got "
                             f"{list(self.roles)}")

    def checked(self, value):
        """``value`` as this input holds it (float64 array for ``"values"``).

        Raises
        ------
        TypeError
            A ``"signal"`` input that is not a :class:`SignalResult`; a ``"signals"`` input
            that is neither a :class:`ReferenceSignals` nor a sequence of SignalResults.
        ValueError
            A ``"values"`` input that is not 1-D; a ``"membership"`` input that is not a 2-D 0/1 matrix.
        """
        if self.rows == "values":
            value = np.asarray(value, dtype=np.float64)
            if value.ndim != 1:
                raise ValueError(f"signals {self.name!r} must be 1-D of shape (n_rows,), got shape {value.shape}")
            return value
        if self.rows == "membership":
            array = np.asarray(value)
            if array.ndim != 2 or not (array.dtype == bool or np.isin(array, (0, 1)).all()):
                raise ValueError(f"signals {self.name!r} must be a 0/1 or bool matrix of shape (n_rows, k), got "
                                 f"shape {array.shape}, dtype {array.dtype}")
            return array.astype(bool)
        if self.rows == "signals":
            if isinstance(value, ReferenceSignals):
                return value
            if isinstance(value, (list, tuple)):
                return ReferenceSignals(tuple(value))
            raise TypeError(f"signals {self.name!r} must be a ReferenceSignals or a list of SignalResult (one per "
                            f"model), got {type(value).__name__}")
        if not isinstance(value, SignalResult):
            raise TypeError(f"signals {self.name!r} must be a SignalResult (SignalResult.from_arrays(values, "
                            f"n_tokens=...)), got {type(value).__name__}")
        return value

    def take(self, value, index: np.ndarray):
        """Rows ``index`` (int array) of ``value``, every field kept aligned."""
        return value[index] if self.rows in ("values", "membership") else value.take(index)


#: Every declared input by name, in declaration order.
INPUTS: dict[str, AttackInput] = {}


def declare_input(spec: AttackInput, *, force: bool = False) -> AttackInput:
    """Add ``spec`` to :data:`INPUTS`.

    Raises
    ------
    ValueError
        The name is declared already (and ``force`` is False).
    """
    if not force and spec.name in INPUTS and INPUTS[spec.name] != spec:
        raise ValueError(f"an input named {spec.name!r} is declared already; pass force=True to replace it")
    INPUTS[spec.name] = spec
    return spec


def input_spec(name: str) -> AttackInput:
    """The declaration of input ``name``.

    Raises
    ------
    ValueError
        An unknown name (the message lists the declared ones).
    """
    if name not in INPUTS:
        raise ValueError(f"unknown signal name(s) [{name!r}]; signals are named after attack inputs {list(INPUTS)}")
    return INPUTS[name]


class AttackInputs:
    """Signals of one sample set (the target pool or the population set), one attribute per declared input.

    ``AttackInputs(texts, target=..., reference=...)``: keywords are names in
    :data:`INPUTS`; an input not given reads as None.

    Attributes
    ----------
    texts : tuple of str, length n_samples
    target, reference : SignalResult or None
        Signals of each model, row-aligned with ``texts``.
    references : ReferenceSignals or None
        Signals of every reference model of the audit's set, row-aligned with ``texts``.
    neighbour_values, neighbour_local : ndarray of shape (n_samples,) or None
        See their declarations in :data:`INPUTS`.
    population : AttackInputs or None
        The population set's inputs, for attacks that compare a sample with population
        samples (``rmia``) or estimate a statistic there (``lira_offline``'s global
        spread), so pool and population scores use the same one. In an audit the
        scoring passes it to both sample sets; for the population set itself it is
        that object (:attr:`is_population` is True).
    is_population : bool
        These rows are the population set (``population`` is ``self``).

    Raises
    ------
    ValueError
        An unknown input name, or an input whose rows do not pair up with ``texts``.
    TypeError
        An input of the wrong type; ``population`` that is not an AttackInputs or ``"self"``.
    """

    __slots__ = ("texts", "_inputs", "_population")

    def __init__(self, texts, *, population=None, **inputs):
        texts = tuple(texts)
        checked = {}
        for name, value in inputs.items():
            if value is None:
                continue
            value = input_spec(name).checked(value)
            if len(value) != len(texts):
                raise ValueError(f"{name} has {len(value)} rows, expected {len(texts)}: rows must pair up with the "
                                 "texts")
            checked[name] = value
        if not (population is None or population == "self" or isinstance(population, AttackInputs)):
            raise TypeError(f"population must be an AttackInputs or 'self', got {type(population).__name__}")
        object.__setattr__(self, "texts", texts)
        object.__setattr__(self, "_inputs", checked)
        object.__setattr__(self, "_population", population)

    def __getattr__(self, name):
        if name in INPUTS:
            return self._inputs.get(name)
        raise AttributeError(f"AttackInputs has no attribute {name!r}; inputs are {list(INPUTS)}")

    def __setattr__(self, name, value):
        raise AttributeError("AttackInputs is read-only")

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def population(self) -> "AttackInputs | None":
        """The population set's inputs (``self`` for the population set itself), or None."""
        return self if isinstance(self._population, str) else self._population

    @property
    def is_population(self) -> bool:
        """True when these rows are the population set."""
        return isinstance(self._population, str)

    def given(self) -> Mapping[str, Any]:
        """The inputs present, by name."""
        return dict(self._inputs)


def _model_signals(stage: StageOne, *, role: str, lm=None, quantities: str | None = None) -> SignalResult:
    """The signals of one model (default: ``role``'s), a job of the stage's engine (None: here), with the per-token
    quantities the audit's attacks declare for the input ``quantities`` (default: ``role``)."""
    compute = compute_signals if stage.engine is None else partial(stage.engine.model_signals, role=role)
    stats = "token_stats" in stage.token_quantities.get(quantities or role, ())
    return compute(getattr(stage.models, role) if lm is None else lm, stage.texts, stage.config.signal,
                   cache=stage.cache, device=stage.device, progress=stage.progress,
                   desc=f"{stage.config.signal.kind} of {role}", stats=stats)


def _reference_set(stage: StageOne) -> ReferenceSignals:
    """The signals of every reference model (the first one's reused when the ``reference`` input has them)."""
    models = stage.models.references or (stage.models.reference,)
    roles = reference_roles(len(models))
    out = []
    for i, role in enumerate(roles):
        if i == 0 and "reference" in stage.computed:
            out.append(stage.computed["reference"])
            continue
        out.append(_model_signals(stage, role=role, lm=models[i], quantities="references"))
    return ReferenceSignals(tuple(out), roles)


def _neighbour_values(stage: StageOne) -> np.ndarray:
    return stage.neighbours.mean_values(stage.texts)


def _neighbour_local(stage: StageOne) -> np.ndarray:
    return local_scores(stage.models.target, stage.texts, stage.neighbours.neighbours(stage.texts),
                        config=stage.config.signal, device=stage.device)


declare_input(AttackInput(
    "target", rows="signal", roles=("target",), compute=partial(_model_signals, role="target"),
    how_to_provide="the target model's signals come with every audit: pass target=...",
    description="Signals of the target model: masked energy (nats) or PLL (nats/token), per SignalConfig.kind; "
                "for a causal LM the mean NLL per predicted token (nats/token)."))
declare_input(AttackInput(
    "reference", rows="signal", roles=("reference",), compute=partial(_model_signals, role="reference"),
    how_to_provide="give a reference model (reference_model=...) trained on similar but disjoint data",
    description="Signals of the reference model, row-aligned with the target's."))
declare_input(AttackInput(
    "neighbour_values", rows="values", roles=("target", "generator"), compute=_neighbour_values,
    how_to_provide="neighbour values are computed by the audit when 'neighbourhood' is requested",
    description="Mean target signal value (energy in nats or PLL in nats/token) of each sample's neighbours "
                "(Mattern et al. 2023, Eq. 3); NaN where a sample has none."))
declare_input(AttackInput(
    "neighbour_local", rows="values", roles=("target", "generator"), compute=_neighbour_local,
    how_to_provide="per-position neighbour differences are computed by the audit when 'neighbourhood_local' is "
                   "requested",
    description="Mean per-position neighbour difference (nats) at the swapped tokens "
                "(mlflow_mia.signals.neighbour_local); NaN where a sample has no neighbours."))
declare_input(AttackInput(
    "references", rows="signals", roles=("reference",), compute=_reference_set,
    how_to_provide="give one or more reference models (references=[...]) trained on similar but disjoint data",
    description="Signals of every reference model of the audit's reference set (ReferenceSignals), each "
                "row-aligned with the target's; the first is the 'reference' input."))


declare_input(AttackInput(
    "shadow_membership", rows="membership", roles=("reference",), compute=stage_membership,
    how_to_provide="the shadows' training record: give the shadows as the references and their record (option "
                   "shadow_record, written by mlflow-mia train-shadows), or shadow_membership=mlflow_mia.attacks."
                   "shadow_record.shadow_membership(record, texts, key) with the signals (stage_one(given=...))",
    description="Which reference (shadow) model trained on each row: bool (n_rows, k), column j = reference j, "
                "from the shadows' keyed training records (Carlini et al. 2022, Sec. IV, online LiRA)."))
