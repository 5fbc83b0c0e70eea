"""Keyed sample hashes: what identifies a text or a group id in logged artifacts.

An unsalted ``sha256(text)`` next to a membership label is a membership oracle:
anyone who can read the run hashes a candidate text and looks it up. What
reaches MLflow is instead ``HMAC-SHA256(key, sha256(text))``, with a key the
user holds and that is never logged. Group ids are hashed the same way. Without
a key a random one is drawn per audit and thrown away, so nobody (the user
included) can look a sample up.

The key comes from, in order: a key file (``hash_key_file`` in
``evaluator_config["mia"]``, ``--hash-key-file`` on the command line), the
environment variable ``MLFLOW_MIA_HASH_KEY``, else a random 32-byte key.

Examples
--------
>>> key = HashKey.from_bytes(b"0123456789abcdef0123456789abcdef", source="test")
>>> lookup_hash("the cat sat", key) == lookup_hash("the cat sat", key.key)
True
>>> lookup_hash("the cat sat", key) == lookup_hash("the cat sat", b"another key of thirty-two bytes or more")
False
>>> HashKey.from_bytes("sixteen byte key", source="test")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: the hash key (test) has 16 bytes; use at least 32, e.g. ...
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import stat
from dataclasses import dataclass, field
from mlflow_mia.data import text_hash

__all__ = ["as_bytes", "HashKey", "lookup_hash", "keyed_hash", "resolve_hash_key", "require_hash_key"]

log = logging.getLogger(__name__)

#: Environment variable holding the hash key (its UTF-8 bytes are the key).
HASH_KEY_ENV = "MLFLOW_MIA_HASH_KEY"
#: Shortest key accepted, in bytes (256 bits, the output size of HMAC-SHA256). A key is tried offline
#: against any logged hash of a guessable text, so a short one (a word, a 16-character phrase) can be found
#: by brute force; ``secrets.token_hex(32)`` gives 64 bytes.
MIN_KEY_BYTES = 32
_CHECK_MESSAGE = b"mlflow-mia hash key check"
#: How to make a strong key in a file only its owner can read (the form a key file must have).
_MAKE_KEY = "(umask 077; python -c 'import secrets; print(secrets.token_hex(32))' > mia_hash.key)"


@dataclass(frozen=True)
class HashKey:
    """A secret key for sample hashes and where it came from.

    Attributes
    ----------
    key : bytes
        The secret, at least :data:`MIN_KEY_BYTES` long. Never logged (``repr`` hides it).
    source : str
        ``"file"``, ``"env"``, ``"random"`` (drawn for one audit, not kept) or
        another label given by the caller.
    """

    key: bytes = field(repr=False)
    source: str

    @classmethod
    def from_bytes(cls, key: bytes | str, *, source: str) -> "HashKey":
        """Wrap ``key`` (str is UTF-8 encoded; surrounding whitespace is dropped).

        Raises
        ------
        ValueError
            The key is shorter than :data:`MIN_KEY_BYTES` bytes.
        """
        raw = as_bytes(key).strip()
        if len(raw) < MIN_KEY_BYTES:
            raise ValueError(
                f"the hash key ({source}) has {len(raw)} bytes; use at least {MIN_KEY_BYTES}, e.g. "
                + _MAKE_KEY)
        return cls(key=raw, source=source)

    @classmethod
    def random(cls) -> "HashKey":
        """A fresh 32-byte key that is never stored: its hashes cannot be looked up."""
        return cls(key=secrets.token_bytes(32), source="random")

    @property
    def is_random(self) -> bool:
        return self.source == "random"

    @property
    def check(self) -> str:
        """16 hex characters that identify the key without revealing it (an HMAC of a fixed message).

        Logged as the run tag ``mia.hash_key_check`` so a user can tell which of their keys an audit used.
        """
        return hmac.new(self.key, _CHECK_MESSAGE, hashlib.sha256).hexdigest()[:16]

    def describe(self) -> str:
        """One line for the report and the run params."""
        if self.is_random:
            return ("random per-audit key, not kept: the sample and group hashes cannot be looked up; set "
                    f"{HASH_KEY_ENV} or hash_key_file to be able to")
        return f"your key ({self.source}, check {self.check}); look a sample up with mlflow_mia.lookup_hash"


def as_bytes(key) -> bytes:
    if isinstance(key, HashKey):
        return key.key
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray)):
        return bytes(key)
    raise TypeError(f"a hash key must be bytes, str or HashKey, got {type(key).__name__}")


def keyed_hash(sha256_hex: str, key) -> str:
    """``HMAC-SHA256(key, sha256_hex)`` as 64 hex characters.

    Parameters
    ----------
    sha256_hex : str
        Hex sha256 of a text (:func:`mlflow_mia.data.text_hash`), the form an
        :class:`~mlflow_mia.audits.membership.AuditResult` keeps in memory.
    key : bytes, str or HashKey
    """
    return hmac.new(as_bytes(key), sha256_hex.encode("ascii"), hashlib.sha256).hexdigest()


def lookup_hash(text: str, key) -> str:
    """The keyed hash under which ``text`` (a sample text or a group id) appears in logged tables.

    Compare it with the ``text_hmac`` column of ``tables/samples.csv`` or
    ``tables/riskiest.csv`` (for a text), or with their ``group`` column (for a
    group id), of an audit run with the same key.

    Parameters
    ----------
    text : str
        The exact text (or group id, as a string) that was audited.
    key : bytes, str or HashKey
        The key the audit used (the contents of the key file or ``MLFLOW_MIA_HASH_KEY``;
        surrounding whitespace is ignored, as when the audit read it).

    Returns
    -------
    str
        ``HMAC-SHA256(key, sha256(text))``, 64 hex characters.
    """
    return keyed_hash(text_hash(str(text)), as_bytes(key).strip())


def require_hash_key(key, where: str) -> HashKey:
    """``key`` itself when it is a :class:`HashKey`; downstream of the options parser a key is never resolved again.

    Parameters
    ----------
    key : HashKey
    where : str
        The function that needs it, for the message.

    Raises
    ------
    TypeError
        ``key`` is not a :class:`HashKey` (e.g. None, bytes or a path).

    Examples
    --------
    >>> key = HashKey.from_bytes(b"k" * 32, source="example")
    >>> require_hash_key(key, "f") is key
    True
    >>> require_hash_key(None, "f")
    Traceback (most recent call last):
    ...
    TypeError: f needs hash_key=HashKey (got None): resolve one with mlflow_mia.hashing.resolve_hash_key(path) or HashKey.from_bytes(key)
    """
    if not isinstance(key, HashKey):
        raise TypeError(f"{where} needs hash_key=HashKey (got {type(key).__name__ if key is not None else None}): "
                        "resolve one with mlflow_mia.hashing.resolve_hash_key(path) or HashKey.from_bytes(key)")
    return key


def resolve_hash_key(path: str | os.PathLike | None = None, *, env=None) -> HashKey:
    """The audit's hash key: from ``path``, else ``$MLFLOW_MIA_HASH_KEY``, else a random one.

    A key file must be a regular file (a symbolic link to one is followed) that only its owner
    may read or write (no group or other permission bits, as ``chmod 600`` leaves it) and
    that holds at least :data:`MIN_KEY_BYTES` bytes: a key others can read (``/etc/passwd``,
    world-readable and public) lets them look every logged hash up.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ValueError
        ``path`` is not a regular file (``/dev/null``, a folder), can be read or written by
        other users (mode bits ``0o077``; POSIX only), or holds a key that is too short
        (see :meth:`HashKey.from_bytes`); each message names the file and the fix.
    """
    env = os.environ if env is None else env
    if path:
        path = os.fspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"hash key file {path!r} does not exist")
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a device, pipe or socket"
            raise ValueError(f"hash key file {path!r} is not a regular file ({kind}); give a file holding "
                             f"{MIN_KEY_BYTES}+ random bytes, e.g. {_MAKE_KEY}")
        if os.name == "posix" and info.st_mode & 0o077:
            raise ValueError(f"hash key file {path!r} can be read or written by other users (mode "
                             f"{stat.S_IMODE(info.st_mode):04o}): anyone who reads it can look up every logged hash; "
                             f"keep a secret key readable by you only: chmod 600 {path}, or make a new one with "
                             f"{_MAKE_KEY}")
        with open(path, "rb") as fh:
            content = fh.read()
        try:
            return HashKey.from_bytes(content, source="file")
        except ValueError as exc:
            raise ValueError(f"hash key file {path!r}: {exc}") from None
    if env.get(HASH_KEY_ENV):
        return HashKey.from_bytes(env[HASH_KEY_ENV], source="env")
    return HashKey.random()
