"""Canary templates: a fixed text with slots that are filled at random.

A slot is written in braces:

- ``{digits:N}``: N random decimal digits (the *secret* of a secret-format canary);
- ``{name}``: a synthetic full name (first and last name drawn from short lists);
- ``{phone}``: a synthetic phone number in the fictional 555 range, ``555-XXX-XXXX``;
- ``{email}``: a synthetic e-mail address at ``example.com`` (reserved for documentation, RFC 2606).

A template whose only slot is one ``{digits:N}`` is *secret-format* (Carlini et al.
2019, Sec. 3): its secret space is every N-digit string, ``10 ** N`` candidates,
and the exposure of its canaries can be measured. Other templates make PII-like
canaries, used by the membership metrics and the one-run bound only.

Examples
--------
>>> t = Template("pin", "my pin is {digits:4}")
>>> t.is_secret_format, t.space_size, t.secret_length
(True, 10000, 4)
>>> t.render("0042")
'my pin is 0042'
>>> Template("x", "call {name} at {phone}").is_secret_format
False
>>> Template("bad", "my pin is {pin}")
Traceback (most recent call last):
...
ValueError: template 'bad': unknown slot '{pin}'; slots are {digits:N}, {name}, {phone}, {email}
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

__all__ = ["Template", "DEFAULT_TEMPLATES", "SECRET_TEMPLATES", "PII_TEMPLATES"]

_SLOT = re.compile(r"\{([^{}]*)\}")
_DIGITS = re.compile(r"digits:(\d+)")
_KINDS = ("name", "phone", "email")

# Synthetic name parts: common given names and surnames combined at random, so a full name
# names nobody in particular (and is not in any training corpus as a pair, with high probability).
FIRST_NAMES = ("alice", "bruno", "carla", "dmitri", "elena", "farid", "greta", "hiro", "ines", "jonas", "keiko",
               "luca", "maya", "nadia", "omar", "petra", "quinn", "rosa", "sven", "tara", "umar", "vera", "wanda",
               "xavier", "yara", "zoltan")
LAST_NAMES = ("abernathy", "bergstrom", "castellano", "dubois", "eriksen", "fontaine", "galloway", "halvorsen",
              "ivanova", "jablonski", "kowalczyk", "lindqvist", "marchetti", "novak", "okonkwo", "pellegrini",
              "quintero", "rasmussen", "sorensen", "takahashi", "umberto", "valdivia", "whitcombe", "yilmaz")


@dataclass(frozen=True)
class Template:
    """A canary template.

    Attributes
    ----------
    id : str
        Short name, logged in place of the text (e.g. ``"account_number"``).
    text : str
        The template with its slots (see the module docstring).

    Raises
    ------
    ValueError
        No slot, an unknown slot, or a ``{digits:N}`` with N outside 1..30.
    """

    id: str
    text: str

    def __post_init__(self):
        slots = self.slots
        if not slots:
            raise ValueError(f"template {self.id!r} has no slot: a canary needs a random part, e.g. {{digits:6}}")
        for slot in slots:
            m = _DIGITS.fullmatch(slot)
            if m is None and slot not in _KINDS:
                raise ValueError(f"template {self.id!r}: unknown slot '{{{slot}}}'; slots are {{digits:N}}, "
                                 "{name}, {phone}, {email}")
            if m is not None and not 1 <= int(m.group(1)) <= 30:
                raise ValueError(f"template {self.id!r}: {{digits:N}} needs N in 1..30, got {m.group(1)}")

    @property
    def slots(self) -> tuple[str, ...]:
        """The slot names in order (``"digits:6"``, ``"name"``, ...)."""
        return tuple(_SLOT.findall(self.text))

    @property
    def is_secret_format(self) -> bool:
        """One ``{digits:N}`` slot and nothing else random: the exposure of its canaries is defined."""
        return len(self.slots) == 1 and _DIGITS.fullmatch(self.slots[0]) is not None

    @property
    def secret_length(self) -> int | None:
        """N of a secret-format template, else None."""
        return int(_DIGITS.fullmatch(self.slots[0]).group(1)) if self.is_secret_format else None

    @property
    def space_size(self) -> int | None:
        """``10 ** N``, the number of candidate secrets of a secret-format template, else None."""
        return 10 ** self.secret_length if self.is_secret_format else None

    def render(self, secret: str) -> str:
        """The text of a secret-format template with ``secret`` in its slot."""
        if not self.is_secret_format:
            raise ValueError(f"template {self.id!r} is not secret-format; use fill()")
        return _SLOT.sub(secret, self.text, count=1)

    def fill(self, rng) -> tuple[str, str | None]:
        """A random canary: ``(text, secret)``; the secret is the digit string of a secret-format template.

        ``rng`` is a :class:`~mlflow_mia.canaries.canary_set.CryptoRandom` (the
        cryptographic source, for a secret set) or a ``numpy.random.Generator`` (a seeded,
        reproducible one); both offer ``integers``.
        """
        values = [_draw(slot, rng) for slot in self.slots]
        parts = iter(values)
        text = _SLOT.sub(lambda _: next(parts), self.text)
        return text, (values[0] if self.is_secret_format else None)


def _digits(n: int, rng: np.random.Generator) -> str:
    return "".join(str(d) for d in rng.integers(0, 10, size=n))


def _draw(slot: str, rng: np.random.Generator) -> str:
    m = _DIGITS.fullmatch(slot)
    if m is not None:
        return _digits(int(m.group(1)), rng)
    first, last = FIRST_NAMES[rng.integers(len(FIRST_NAMES))], LAST_NAMES[rng.integers(len(LAST_NAMES))]
    if slot == "name":
        return f"{first} {last}"
    if slot == "phone":
        return f"555-{_digits(3, rng)}-{_digits(4, rng)}"
    return f"{first}.{last}{_digits(3, rng)}@example.com"


#: Secret-format templates (Carlini et al. 2019): a fixed sentence and a random digit secret.
SECRET_TEMPLATES = (
    Template("account_number", "my account number is {digits:9}"),
    Template("access_code", "the access code for the server room is {digits:6}"),
)
#: PII-like templates with synthetic names, phone numbers and e-mail addresses.
PII_TEMPLATES = (
    Template("contact_phone", "please call {name} on {phone} about the contract"),
    Template("contact_email", "the report was sent by {name} from {email}"),
    Template("patient_record", "patient {name} , phone {phone} , was seen on day {digits:3}"),
)
DEFAULT_TEMPLATES = SECRET_TEMPLATES + PII_TEMPLATES


def parse_templates(spec) -> tuple[Template, ...]:
    """Templates from a list of :class:`Template`, of strings or of ``{"id", "text"}`` dicts, or None (defaults).

    A plain string gets the id ``user_<i>``.

    Raises
    ------
    ValueError
        An empty list, duplicate ids, or a template :class:`Template` refuses.
    """
    if spec is None:
        return DEFAULT_TEMPLATES
    if isinstance(spec, (str, Template)):
        spec = [spec]
    out = []
    for i, item in enumerate(spec):
        if isinstance(item, Template):
            out.append(item)
        elif isinstance(item, str):
            out.append(Template(f"user_{i}", item))
        elif isinstance(item, dict) and set(item) == {"id", "text"}:
            out.append(Template(str(item["id"]), str(item["text"])))
        else:
            raise ValueError(f"a template must be a string, a Template or a dict with keys id and text, got {item!r}")
    if not out:
        raise ValueError("templates is empty: give at least one template, e.g. 'my pin is {digits:6}'")
    ids = [t.id for t in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"template ids must be unique, got {ids}")
    return tuple(out)
