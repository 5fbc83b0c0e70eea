"""User options, each declared once: on the dataclass field that holds its value.

An option is a dataclass field whose metadata holds an :class:`Option` (made by
:func:`option`): its help text, its flat key (the ``evaluator_config["mia"]`` key,
also the base of the CLI flag and of the MLproject parameter), its range or
choices, and which audits and commands use it. The field's type annotation and
default are the option's type and default, so nothing about an option is written
twice. :mod:`mlflow_mia.options.schema` derives the command-line flags, the
evaluator keys, their error messages and their documentation from these fields;
each config's ``__post_init__`` checks the declared ranges with :func:`check_options`.
A setting several audits share is declared once and held by the others' configs with
:func:`shared_option` (the same declaration, the audit's own default); a field that only
carries the value of an option declared elsewhere (an attack's setting) is a
:func:`same_option`.

Values from a front end (strings from the CLI or MLproject, numbers or booleans
from a config dict) are converted with a pydantic ``TypeAdapter`` for the field's
type (:func:`coerce`), then checked against the declaration.

Examples
--------
>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Masks:
...     num_masks: int = option(10, "random masks per text", ge=1)
...     def __post_init__(self):
...         check_options(self)
>>> Masks(num_masks=0)
Traceback (most recent call last):
    ...
ValueError: num_masks must be an int >= 1, got 0
>>> coerce(declared_options(Masks)["num_masks"], "4")
4
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["OptionField", "option", "shared_option", "same_option", "declared_options", "check_options", "coerce",
           "is_unset", "OptionError"]

_METADATA_KEY = "mlflow_mia.option"
_SAME_KEY = "mlflow_mia.same_option"


class OptionError(ValueError):
    """A bad input whose fix is an option: the message names it as the user's front end spells it.

    ``template`` holds ``{option}`` where the option goes; ``str(error)`` spells it as an evaluator key
    (``"group_column"``); a front end re-spells it with :meth:`spelled` (the command line
    ``--group-column``, ``mlflow run`` ``-P group_column=``).

    >>> e = OptionError("no column 'patient_id': name the right one with {option}", "group_column")
    >>> print(e); print(e.spelled("--group-column"))
    no column 'patient_id': name the right one with "group_column"
    no column 'patient_id': name the right one with --group-column
    """

    def __init__(self, template: str, key: str):
        self.template, self.key = template, key
        super().__init__(self.spelled(f'"{key}"'))

    def spelled(self, option: str) -> str:
        """The message with the option spelled ``option``."""
        return self.template.replace("{option}", option)


@dataclass(frozen=True)
class Option:
    """How a config field is offered to users.

    Attributes
    ----------
    help : str
        One sentence (no default: that is rendered from the field's default).
    key : str or None
        Flat key (``evaluator_config["mia"]`` key, MLproject parameter base); None =
        the field name.
    ge, gt, le, lt : float or None
        Range of a number (of each element, for a tuple). NaN and infinity never fit a
        number option, whatever its range.
    choices : tuple of str or None
        Allowed values of a string (case-insensitive on input).
    pattern : str or None
        Regular expression a string (each element, for a tuple) must match in full.
    pattern_doc : str or None
        What ``pattern`` allows, in words (for messages and help).
    default_doc : str or None
        How the default reads when it is not a plain value ("the model's limit").
    used_by : frozenset of str or None
        Commands (``audit``, ``compare``, ``ner-audit``, ``analyze``, ``build-demo``) and
        evaluator methods (``mia``, ``ner_prompts``) that take the option; None = the
        ones of the config family that declares it (see ``mlflow_mia.options.schema``).
    flags : tuple of str
        Command-line flags; empty = ``--`` + the key with dashes. ``cli=False``: none.
    cli : bool
        Offered on the command line.
    metavar : str or None
    invert : bool
        A boolean whose flag switches it off (``--no-tag-model-version``, ``--quiet``).
    flag_help : str or None
        Help of such a switch (what giving it does).
    repeat : bool
        The flag may be given several times (its values are joined).
    mlproject : bool
        Offered as an MLproject parameter of the commands that take it.
    parse : callable or None
        Converter for values that no type annotation describes (the release gate,
        a device, a key file); it raises ``ValueError`` naming the option.
    unset : tuple
        Values that mean "not given" besides None and an empty string.
    short : str or None
        What ``--help`` says, when ``help`` is long (the options reference, the evaluator's key table and
        the MLproject keep ``help``); None = ``help``, cut at its first clause when long
        (:func:`mlflow_mia.options.schema.help_text`).
    """

    help: str
    key: str | None = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple | None = None
    pattern: str | None = None
    pattern_doc: str | None = None
    default_doc: str | None = None
    used_by: frozenset | None = None
    flags: tuple = ()
    cli: bool = True
    metavar: str | None = None
    short: str | None = None
    invert: bool = False
    flag_help: str | None = None
    repeat: bool = False
    mlproject: bool = True
    parse: Callable | None = None
    unset: tuple = ()

    def range_text(self) -> str:
        """The range in interval notation (``(0, 1]``, ``>= 1``), or ''."""
        low = (f"[{self.ge:g}" if self.ge is not None else f"({self.gt:g}" if self.gt is not None else None)
        high = (f"{self.le:g}]" if self.le is not None else f"{self.lt:g})" if self.lt is not None else None)
        if low and high:
            return f"in {low}, {high}"
        if low:
            return f">= {self.ge:g}" if self.ge is not None else f"> {self.gt:g}"
        if high:
            return f"<= {self.le:g}" if self.le is not None else f"< {self.lt:g}"
        return ""


def option(default=dataclasses.MISSING, help: str = "", *, repr: bool = True, **kwargs) -> Any:
    """A dataclass field declared as a user option (see :class:`Option` for ``kwargs``).

    ``default`` may be a tuple or None (immutable values only: the configs are frozen);
    ``repr=False`` keeps a secret out of the dataclass's ``repr``.
    """
    return field(default=default, repr=repr, metadata={_METADATA_KEY: Option(help=help, **kwargs)})


def shared_option(owner: type, name: str, default=dataclasses.MISSING) -> Any:
    """A field holding the option declared on ``owner.name`` (the same declaration, not a copy).

    Shared settings (the signal, the metrics, the seed) are declared once, on the
    config of the part they belong to, and composed into each audit's config with
    this: the key, help, range and choices are the declaration's; only the default
    may differ by audit (``default``; the declared one when omitted).

    Raises
    ------
    TypeError
        ``owner.name`` is not a field declared with :func:`option`.

    Examples
    --------
    >>> @dataclass(frozen=True)
    ... class Masks:
    ...     num_masks: int = option(10, "random masks per text", ge=1)
    >>> @dataclass(frozen=True)
    ... class Canary:
    ...     num_masks: int = shared_option(Masks, "num_masks", 4)
    ...     def __post_init__(self):
    ...         check_options(self)
    >>> declared_options(Canary)["num_masks"].option is declared_options(Masks)["num_masks"].option
    True
    >>> Canary(num_masks=0)
    Traceback (most recent call last):
        ...
    ValueError: num_masks must be an int >= 1, got 0
    """
    found = {f.name: f for f in dataclasses.fields(owner)}.get(name)
    if found is None or _METADATA_KEY not in found.metadata:
        raise TypeError(f"{owner.__name__}.{name} is not a declared option")
    if default is dataclasses.MISSING:
        default = found.default
    return field(default=default, repr=found.repr, metadata=found.metadata)


def same_option(key: str, default) -> Any:
    """A dataclass field set from the option ``key`` declared on another field (one value, two homes)."""
    return field(default=default, metadata={_SAME_KEY: key})


@dataclass(frozen=True)
class OptionField:
    """A declared option with the field that holds it.

    Attributes
    ----------
    key : str
    name : str
        Field name (differs from ``key`` where the flat key is older: ``signal`` -> ``kind``).
    owner : type
        The dataclass that declares it.
    type : type
        The field's resolved type annotation.
    default : object
    option : Option
    """

    key: str
    name: str
    owner: type
    type: Any
    default: Any
    option: Option

    @property
    def optional(self) -> bool:
        return _split_optional(self.type)[1]

    @property
    def base(self):
        return _split_optional(self.type)[0]

    @property
    def is_bool(self) -> bool:
        return self.base is bool

    def expected(self) -> str:
        """The expected form in words: ``an int >= 1``, ``a list of numbers in (0, 1)``, ``one of 'a', 'b'``."""
        opt, base = self.option, self.base
        if opt.choices:
            text = "one of " + ", ".join(repr(c) for c in opt.choices)
        elif base is bool:
            text = "true or false"
        elif _is_tuple(base):
            element = {int: "ints", float: "numbers", str: "names"}.get(_element(base), "values")
            text = f"a non-empty list (or comma-separated string) of {element}"
        else:
            text = {int: "an int", float: "a number", str: "a string"}.get(base, "a value")
            if base is float and (opt.ge is None and opt.gt is None or opt.le is None and opt.lt is None):
                text = "a finite number"  # inf would fit an open-ended range; it is refused all the same
        extra = opt.range_text() or opt.pattern_doc or ""
        text = f"{text} {extra}" if extra else text
        return f"{text} or None" if self.optional and base is not Any else text

    def check(self, value, name: str | None = None) -> None:
        """Raise ``ValueError`` (naming ``name``, default the key) unless ``value`` fits the declaration."""
        if value is None and (self.optional or self.base is Any):
            return
        if not self._fits(value):
            raise ValueError(f"{name or self.key} must be {self.expected()}, got {value!r}")

    def _fits(self, value) -> bool:
        base = self.base
        if base is Any or self.option.parse is not None:
            return True
        if _is_tuple(base):
            if not isinstance(value, tuple) or not value:
                return False
            return all(self._scalar_fits(v, _element(base)) for v in value)
        return self._scalar_fits(value, base)

    def _scalar_fits(self, value, base) -> bool:
        opt = self.option
        if base is bool:
            return isinstance(value, bool)
        if base in (int, float):
            if isinstance(value, bool) or not isinstance(value, int if base is int else (int, float)):
                return False
            if isinstance(value, float) and not math.isfinite(value):  # NaN, and inf where the range is open
                return False
            return ((opt.ge is None or value >= opt.ge) and (opt.gt is None or value > opt.gt)
                    and (opt.le is None or value <= opt.le) and (opt.lt is None or value < opt.lt))
        if base is str:
            if not isinstance(value, str):
                return False
            if opt.choices and value not in opt.choices:
                return False
            return opt.pattern is None or re.fullmatch(opt.pattern, value) is not None
        return isinstance(value, base) if isinstance(base, type) else True


def _split_optional(tp):
    """``(base, optional)`` of ``X | None``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], len(args) < len(typing.get_args(tp))
    return tp, False


def _is_tuple(tp) -> bool:
    return tp is tuple or typing.get_origin(tp) is tuple


def _element(tp):
    args = typing.get_args(tp)
    return args[0] if args else Any


@functools.lru_cache(maxsize=None)
def declared_options(cls) -> dict[str, OptionField]:
    """The options a dataclass declares (its own and inherited fields), by key, in field order."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        opt = f.metadata.get(_METADATA_KEY)
        if opt is None:
            continue
        key = opt.key or f.name
        default = f.default if f.default is not dataclasses.MISSING else None
        out[key] = OptionField(key=key, name=f.name, owner=_declaring_class(cls, f.name), type=hints[f.name],
                               default=default, option=opt)
    return out


def same_option_fields(cls) -> dict[str, str]:
    """``{field name: option key}`` of the fields set from an option declared elsewhere."""
    return {f.name: f.metadata[_SAME_KEY] for f in dataclasses.fields(cls) if _SAME_KEY in f.metadata}


def _declaring_class(cls, name):
    for klass in reversed(cls.__mro__):
        if name in getattr(klass, "__annotations__", {}):
            return klass
    return cls


def check_options(obj) -> None:
    """Check every declared option of a dataclass instance against its declaration.

    Raises
    ------
    ValueError
        The first field whose value does not fit, named with its expected form.
    """
    for opt in declared_options(type(obj)).values():
        opt.check(getattr(obj, opt.name), name=opt.name)


def is_unset(opt: OptionField, value) -> bool:
    """True for None, a blank string (an unset MLproject parameter) and the option's ``unset`` values."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return True
    if isinstance(value, str):
        return value.strip() in {str(u) for u in opt.option.unset}
    return not isinstance(value, bool) and value in opt.option.unset


@functools.lru_cache(maxsize=None)
def _adapter(tp):
    from pydantic import ConfigDict, TypeAdapter

    return TypeAdapter(tp, config=ConfigDict(str_strip_whitespace=True, coerce_numbers_to_str=True))


def coerce(opt: OptionField, value):
    """``value`` from any front end as the option's type, checked against its declaration.

    Strings are read as their values (``"10"``, ``"10.0"`` -> 10; ``"true"``/``"no"``;
    ``"0.1,0.01"`` -> a tuple), by a pydantic ``TypeAdapter`` of the field's type.
    Choices are matched case-insensitively. ``opt.option.parse`` replaces all of
    this for options no type describes.

    Raises
    ------
    ValueError
        ``"<key> must be <expected form>, got <value>"``.
    """
    if opt.option.parse is not None:
        return opt.option.parse(value)
    base, raw = opt.base, value
    if base is Any:
        return value.strip() if isinstance(value, str) else value
    if _is_tuple(base):
        if isinstance(value, str):
            value = [v for v in (s.strip() for s in value.split(",")) if v]
        elif not isinstance(value, (list, tuple)):
            value = [value]
        value = tuple(value)
    error = ValueError(f"{opt.key} must be {opt.expected()}, got {raw!r}")
    if base is not bool and _has_bool(value):  # pydantic reads True as 1
        raise error
    from pydantic import ValidationError

    try:
        out = _adapter(opt.type).validate_python(value)
    except ValidationError:
        raise error from None
    if opt.option.choices and isinstance(out, str):
        lowered = {c.lower(): c for c in opt.option.choices}
        out = lowered.get(out.lower(), out)
    try:
        opt.check(out)
    except ValueError:
        raise error from None
    return out


def _has_bool(value) -> bool:
    return isinstance(value, bool) or (isinstance(value, tuple) and any(isinstance(v, bool) for v in value))
