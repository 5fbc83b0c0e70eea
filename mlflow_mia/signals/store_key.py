"""The secret that signs the rows of every on-disk store, and the row MAC.

A cache folder (``signals.sqlite``, ``neighbours.sqlite``, ``ner_confidence.sqlite``)
or a Spark Parquet store may sit on a shared disk that others can write. A plain
checksum of a row does not stop them: its formula is public, so a rewritten row
comes with a recomputed checksum. Every stored row therefore carries
``HMAC-SHA256(K, row)`` (RFC 2104) under a key ``K`` derived from a secret that is
kept **outside** the store: the file named by ``$MLFLOW_MIA_STORE_KEY_FILE``, else
``$XDG_CONFIG_HOME/mlflow_mia/store.key`` (``~/.config/mlflow_mia/store.key``),
created on first use with 32 random bytes and mode 0600. Someone who can write the
store but not read that file cannot make a row that verifies; a row that does not
verify is recomputed (SQLite caches) or refused (Spark store), never used.

To share a cache between people or machines, share the key file too (point
``$MLFLOW_MIA_STORE_KEY_FILE`` at one copy readable only by them); rows written
under another key are recomputed, then rewritten under this one.

References
----------
.. [1] H. Krawczyk, M. Bellare, R. Canetti, "HMAC: Keyed-Hashing for Message
   Authentication", RFC 2104, 1997.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import struct
from typing import Iterable

__all__ = ["load_store_key", "derive_key", "row_mac", "mac_matches"]

KEY_ENV = "MLFLOW_MIA_STORE_KEY_FILE"
MIN_KEY_BYTES = 32


def store_key_path() -> str:
    """Path of the store key file: ``$MLFLOW_MIA_STORE_KEY_FILE``, else ``<config dir>/mlflow_mia/store.key``.

    The config dir is ``$XDG_CONFIG_HOME`` or ``~/.config``.
    """
    path = os.environ.get(KEY_ENV)
    if path:
        return os.path.abspath(os.path.expanduser(path))
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(os.path.abspath(config), "mlflow_mia", "store.key")


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder


def _create(path: str) -> None:
    """Write a new random key to ``path`` (mode 0600) unless another process got there first."""
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    tmp = os.path.join(folder, f".store.key.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(MIN_KEY_BYTES) + "\n")
        try:
            os.link(tmp, path)  # atomic, and fails when the file exists: concurrent first uses agree
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)


def load_store_key(*, store_dir: str | os.PathLike | None = None) -> bytes:
    """The store secret (at least 32 bytes), creating the key file on first use.

    Parameters
    ----------
    store_dir : str or os.PathLike, optional
        The folder of the store about to be opened: the key file must not lie in it
        (whoever can write the store could then read or replace the key).

    Returns
    -------
    bytes
        The key file's content without surrounding whitespace.

    Raises
    ------
    ValueError
        The key file lies inside ``store_dir``, is not a regular file, can be read or
        written by other users (group/other permission bits: ``chmod 600`` it), or
        holds fewer than 32 bytes. Each message names the file and the fix.
    """
    path = store_key_path()
    if store_dir is not None and _inside(path, os.fspath(store_dir)):
        raise ValueError(f"the store key file {path} lies inside the store folder {os.fspath(store_dir)}: whoever "
                         f"can write the store could read or replace it. Point ${KEY_ENV} at a file elsewhere")
    if not os.path.lexists(path):
        _create(path)
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"the store key file {path} is not a regular file; point ${KEY_ENV} at a file")
    if os.name == "posix" and info.st_mode & 0o077:
        raise ValueError(f"the store key file {path} can be read or written by other users (mode "
                         f"{stat.S_IMODE(info.st_mode):04o}); run chmod 600 {path}")
    with open(path, "rb") as fh:
        key = fh.read().strip()
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"the store key file {path} holds {len(key)} bytes; use at least {MIN_KEY_BYTES} random "
                         f"bytes (delete the file and a new key is created)")
    return key


def derive_key(key: bytes, purpose: str) -> bytes:
    """``HMAC-SHA256(key, "mlflow-mia/" + purpose)``: one key per store kind or partition.

    A derived key can be handed to Spark executors without the secret it comes from.
    """
    return hmac.new(key, f"mlflow-mia/{purpose}".encode(), hashlib.sha256).digest()


def _field(value) -> bytes:
    """An unambiguous encoding of one stored value: a type tag, a length, the bytes."""
    if hasattr(value, "dtype") and getattr(value, "ndim", None) == 0:
        value = value.item()  # a numpy scalar (as pandas gives them) encodes as the Python value
    if value is None:
        tag, data = b"n", b""
    elif isinstance(value, (bytes, bytearray, memoryview)):
        tag, data = b"b", bytes(value)
    elif isinstance(value, bool):
        tag, data = b"i", str(int(value)).encode()
    elif isinstance(value, int):
        tag, data = b"i", str(value).encode()
    elif isinstance(value, float):
        tag, data = b"f", struct.pack("<d", value)
    else:
        tag, data = b"s", str(value).encode("utf-8")
    return tag + struct.pack("<Q", len(data)) + data


def row_mac(key: bytes, fields: Iterable) -> str:
    """Hex ``HMAC-SHA256(key, fields)`` of one stored row.

    Parameters
    ----------
    key : bytes
        A key from :func:`derive_key`.
    fields : iterable
        The row's identity and values as stored (str, int, bool, float, bytes or
        None); each is encoded with its type and length, so no two rows share an
        encoding. ``True`` and ``1`` encode alike (SQLite stores both as 1).

    Returns
    -------
    str
        64 hex digits.

    Examples
    --------
    >>> k = derive_key(b"k" * 32, "example")
    >>> row_mac(k, ["key", "hash", 1.5]) == row_mac(k, ["key", "hash", 1.5])
    True
    >>> row_mac(k, ["key", "hash", 1.5]) == row_mac(k, ["key", "hash", 1.25])
    False
    """
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for value in fields:
        mac.update(_field(value))
    return mac.hexdigest()


def mac_matches(stored, expected: str) -> bool:
    """Constant-time check that a stored MAC (of whatever type was written) equals the expected hex MAC.

    >>> mac_matches("ab", "ab"), mac_matches("ab", "ac"), mac_matches(None, "ab"), mac_matches("é", "ab")
    (True, False, False, False)
    """
    return isinstance(stored, str) and stored.isascii() and hmac.compare_digest(stored, expected)
