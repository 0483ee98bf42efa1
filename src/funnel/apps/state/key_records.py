"""What a key is (`funnel.apps.state.keys` says how keys are used): its id, role, collections and times,
how a new one is made and how its secret is hashed."""


from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from funnel.errors import ConfigError, FunnelError

PREFIX = "fk_"
ID_HEX = 12
SECRET_BYTES = 32
CACHE_TTL_S = 5.0
FILE_NAME = "keys.sqlite"
MAX_EXPIRES_DAYS = 36500
MAX_RPM = 1_000_000
MAX_UPLOAD_MB_PER_DAY = 10_000_000
TOKEN = re.compile(rf"^{PREFIX}([0-9a-f]{{{ID_HEX}}})_([A-Za-z0-9_-]{{43}})$")
COLLECTION = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_SCRYPT = {"n": 2**12, "r": 8, "p": 1, "dklen": 32}
DUMMY_SALT = secrets.token_bytes(16)
DUMMY_DIGEST = hashlib.scrypt(b"no such key", salt=DUMMY_SALT, **_SCRYPT)


class Role(str, Enum):
    READER = "reader"
    WRITER = "writer"
    ADMIN = "admin"

    @classmethod
    def parse(cls, text: str) -> Role:
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise ConfigError(f"unknown role {text!r}: choose one of reader, writer, admin") from None

    def at_least(self, other: Role) -> bool:
        order = list(Role)
        return order.index(self) >= order.index(other)


class KeyRejected(FunnelError):
    """A key that is malformed, unknown, wrong, expired or revoked (HTTP 401)."""

    exit_code = 2


@dataclass(frozen=True)
class KeyRecord:
    """One key as stored: everything but the secret. `collections` None: every collection."""

    id: str
    role: Role
    collections: tuple[str, ...] | None
    created: float
    expires: float | None = None
    revoked: float | None = None
    salt: bytes = field(default=b"", repr=False)
    digest: bytes = field(default=b"", repr=False)
    rpm: int | None = None  # requests per minute; None: the service's default ([serve] key_rpm); 0: unlimited
    upload_mb_per_day: float | None = None  # upload MiB per UTC day; None and 0 likewise

    def state(self, now: float) -> str:
        if self.revoked is not None:
            return "revoked"
        if self.expires is not None and now >= self.expires:
            return "expired"
        return "active"

    def sees(self, collection: str) -> bool:
        return self.collections is None or collection in self.collections

    @property
    def all_collections(self) -> bool:
        return self.collections is None

    def public(self, now: float) -> dict:
        """What lists show: no salt, no hash."""
        return {"id": self.id, "role": self.role.value,
                "collections": list(self.collections) if self.collections is not None else "all",
                "created": _iso(self.created), "expires": _iso(self.expires), "revoked": _iso(self.revoked),
                "state": self.state(now), "rpm": self.rpm, "upload_mb_per_day": self.upload_mb_per_day}


@dataclass(frozen=True)
class NewKey:
    record: KeyRecord
    token: str = field(repr=False)  # the only time the secret exists outside the client


def _iso(ts: float | None) -> str | None:
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def parse_token(token: str) -> tuple[str, str] | None:
    """(id, secret) of a well-formed key, else None."""
    match = TOKEN.match(token)
    return (match.group(1), match.group(2)) if match else None


def hash_secret(secret: str, salt: bytes) -> bytes:
    return hashlib.scrypt(secret.encode(), salt=salt, **_SCRYPT)


def new_key(role: Role | str, collections: Iterable[str] | None = None, expires_days: float | None = None,
            now: float | None = None, rpm: int | None = None, upload_mb_per_day: float | None = None) -> NewKey:
    """A fresh key (id, secret, salt, hash), not yet stored. Bad collections, expiry or limits: ConfigError.
    `rpm`, `upload_mb_per_day`: None follows the service's defaults, 0 is unlimited."""
    role = role if isinstance(role, Role) else Role.parse(role)
    names = None
    if collections is not None:
        names = tuple(sorted({c.strip() for c in collections}))
        bad = [c for c in names if not COLLECTION.match(c)]
        if bad or not names:
            raise ConfigError(f"not a collection name: {bad[0]!r}" if bad else "give at least one collection")
    if expires_days is not None and not 0 < expires_days <= MAX_EXPIRES_DAYS:
        raise ConfigError(f"expiry must be between 0 and {MAX_EXPIRES_DAYS} days, not {expires_days}")
    if rpm is not None and not 0 <= rpm <= MAX_RPM:
        raise ConfigError(f"rpm must be between 0 (unlimited) and {MAX_RPM}, not {rpm}")
    if upload_mb_per_day is not None and not 0 <= upload_mb_per_day <= MAX_UPLOAD_MB_PER_DAY:
        raise ConfigError(f"upload MiB per day must be between 0 (unlimited) and {MAX_UPLOAD_MB_PER_DAY}, "
                          f"not {upload_mb_per_day}")
    now = time.time() if now is None else now
    key_id = secrets.token_hex(ID_HEX // 2)
    secret = secrets.token_urlsafe(SECRET_BYTES)
    salt = secrets.token_bytes(16)
    expires = now + expires_days * 86400 if expires_days is not None else None
    record = KeyRecord(key_id, role, names, now, expires, None, salt, hash_secret(secret, salt), rpm,
                       upload_mb_per_day)
    return NewKey(record, f"{PREFIX}{key_id}_{secret}")
