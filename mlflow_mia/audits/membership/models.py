"""The models of one audit, by role: loaded once on this machine, whatever engine computes their signals.

:class:`AuditModels` loads the target, the reference models and (when an attack needs
one) the neighbour generator with the engine's loader, refuses models of different
kinds (:func:`~mlflow_mia.signals.dispatch.check_model_kinds`) and says which signal the
target gets (:meth:`AuditModels.config_for`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
import dataclasses

from mlflow_mia.attacks import required_roles
from mlflow_mia.attacks.inputs import reference_roles
from mlflow_mia.config import AuditConfig
from mlflow_mia.signals import MaskedLM
from mlflow_mia.signals.causal_model import as_language_model, language_models
from mlflow_mia.signals.dispatch import check_model_kinds, signal_config_for
from mlflow_mia.signals.neighbours import choose_generator

__all__ = ["AuditModels"]


@dataclass(frozen=True)
class AuditModels:
    """The models of one audit, by role.

    Attributes
    ----------
    target : MaskedLM or None
        The model under audit (None when scoring signals computed elsewhere).
    generator : MaskedLM, str or None
        The masked LM proposing neighbours (``neighbourhood``): a model, or a
        local folder loaded when neighbours are generated.
    references : tuple of MaskedLM
        Every reference model of the audit's reference set (roles
        :func:`~mlflow_mia.attacks.inputs.reference_roles`); ``(reference,)`` with one,
        empty with none. Any sequence given is stored as a tuple.
    reference : MaskedLM or None
        Read-only: the first of ``references`` (``likelihood_ratio``), None with none.
    shadow_membership : callable or None
        ``texts -> bool ndarray of shape (len(texts), k)``: which reference (shadow) model
        trained on each text, read from the shadows' training record
        (:func:`~mlflow_mia.attacks.shadow_record.shadow_membership`); stage 1 computes the
        ``shadow_membership`` input of ``lira_online`` with it. None: no record.
    """

    target: MaskedLM | None = None
    generator: object = None
    references: tuple = ()
    shadow_membership: object = None

    def __post_init__(self):
        object.__setattr__(self, "references", tuple(self.references))

    @property
    def reference(self):
        """The first reference model, or None when the audit has none."""
        return self.references[0] if self.references else None

    @classmethod
    def build(cls, target, *, references: Sequence | None = None, generator=None,
              config: AuditConfig | None = None, load=None, shadow_membership=None) -> "AuditModels":
        """Load each role the audit has and pick the neighbour generator.

        Parameters
        ----------
        target, generator : MaskedLM, (model, tokenizer) or str (a local folder), optional
            What the engine's ``load`` accepts (the Spark engine: model URIs and folders).
        config : AuditConfig, optional
            When one of its attacks needs the generator role
            (:func:`~mlflow_mia.attacks.required_roles`), the generator follows
            :func:`~mlflow_mia.signals.neighbours.choose_generator`: ``generator``, then
            ``config.neighbourhood.generator_model`` (a folder, loaded when first used),
            then the first of ``references``. Otherwise no generator.
        load : callable, optional
            ``load(model, role=...) -> MaskedLM or CausalLM``: the engine's loader (default
            :func:`~mlflow_mia.signals.causal_model.as_language_model`: either kind, read from the model).
        references : sequence, optional
            The reference models (each what ``load`` accepts), loaded with the roles
            ``reference``, ``reference_2``, ...; one is ``[reference]``.
        shadow_membership : callable, optional
            Kept as the attribute (which shadow trained on each text).

        Raises
        ------
        ValueError
            ``references`` not a list (one model: ``[model]``) or empty; models of
        different kinds (:func:`~mlflow_mia.signals.dispatch.check_model_kinds`).
        """
        config = config or AuditConfig()
        load = load or as_language_model
        refs = _reference_list(references)
        target = None if target is None else load(target, role="target")
        loaded = tuple(load(m, role=role) for m, role in zip(refs, reference_roles(len(refs))))
        reference = loaded[0] if loaded else None
        if "generator" in required_roles(config.attacks):
            generator = None if generator is None else load(generator, role="neighbour generator")
            generator = choose_generator(generator, configured=config.neighbourhood.generator_model,
                                         reference=reference)
        else:
            generator = None
        # models of different kinds (causal vs masked) fail here, before the tokenizer checks
        check_model_kinds(target, loaded, attacks=config.attacks, generator=generator)
        return cls(target=target, generator=generator, references=loaded, shadow_membership=shadow_membership)

    def config_for(self, config: AuditConfig) -> AuditConfig:
        """``config`` with the signal the target gets (:func:`~mlflow_mia.signals.dispatch.signal_config_for`).

        A causal target's audit records ``signal="causal"`` (its values are mean NLLs per
        predicted token), not the default ``"energy"`` it was asked with.
        """
        if self.target is None or not hasattr(self.target, "model"):
            return config
        signal = signal_config_for(self.target, config.signal)
        return config if signal == config.signal else dataclasses.replace(config, signal=signal)

    def identities(self) -> dict:
        """``{role: {"identity": model id, "name": ...}}`` of every model present (generator: folder or model).

        Reference models are ``reference``, ``reference_2``, ... (one key each).
        ``AuditResult.models`` and ``audit_config.json`` hold this record; ``AuditResult.info``
        derives ``target_model``, ``reference_model``, ``neighbour_generator`` from it.
        """
        out = {}
        roles: list[tuple[str, object]] = [("target", self.target)]
        roles += list(zip(reference_roles(len(self.references)), self.references))
        roles.append(("generator", self.generator))
        for role, lm in roles:
            if isinstance(lm, language_models()):
                out[role] = {"identity": lm.model_id, "name": lm.name, "weights": lm.weights_id}
            elif lm is not None:
                out[role] = {"identity": str(lm), "name": None}
        return out


def _reference_list(references) -> list:
    """The reference models as a list: ``list(references)``, or ``[]`` for None."""
    if references is None:
        return []
    if isinstance(references, (str, bytes)) or not hasattr(references, "__iter__"):
        raise ValueError(f"references must be a list of models, got {type(references).__name__}; pass one model "
                         "as references=[model]")
    refs = list(references)
    if not refs:
        raise ValueError("references is empty: give at least one reference model, or leave it out")
    return refs
