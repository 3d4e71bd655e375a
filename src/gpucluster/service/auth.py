"""Bearer tokens: the admin token's origin and rotation, tenant tokens, and who a request is.

Lifecycle (``docs/security.md``):

* **Admin.** ``--admin-token``/``ServiceConfig.admin_token``, else ``$GPUCLUSTER_ADMIN_TOKEN``, else the token
  saved in ``DATA_DIR/admin-token`` (0600), else a new one generated and saved there (and printed, that once).
  On every start the store's admin token is *replaced* by this one: changing the variable and restarting
  revokes the old token. ``POST /api/v1/admin/token`` rotates a saved or generated token at once.
* **Tenants.** ``POST /api/v1/tenants`` and ``POST /api/v1/tenants/{name}/tokens`` issue a new token and revoke
  the tenant's previous ones in the same transaction; ``DELETE /api/v1/tenants/{name}/tokens`` revokes them all.
* Tokens shorter than :data:`MIN_TOKEN_CHARS` are refused where they are configured; presented tokens longer
  than :data:`MAX_TOKEN_CHARS` are refused before hashing. Only SHA-256 hashes are stored.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from gpucluster.service.errors import ApiError
from gpucluster.service.store import Store

ADMIN_ENV = "GPUCLUSTER_ADMIN_TOKEN"
ADMIN_TOKEN_FILE = "admin-token"
MIN_TOKEN_CHARS = 16
"""Shortest admin token accepted from a flag, the environment or the token file."""
MAX_TOKEN_CHARS = 256
"""Longest bearer token looked up (generated ones are 36-90 characters)."""


class TokenError(ValueError):
    """A configured token is unusable; ``str`` says which one and why."""


@dataclass(frozen=True, slots=True)
class Principal:
    role: str
    """``admin`` or ``tenant``."""
    tenant: str | None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def actor(self) -> str:
        return "admin" if self.is_admin else f"tenant:{self.tenant}"


@dataclass(frozen=True, slots=True)
class AdminToken:
    token: str
    source: str
    """``flag``, ``env``, ``file`` (saved by an earlier start) or ``generated`` (new, saved now)."""

    @property
    def rotatable(self) -> bool:
        """Only a token the data directory owns can be rotated through the API."""
        return self.source in ("file", "generated")


def new_admin_token() -> str:
    return "gca_" + secrets.token_urlsafe(24)


def new_tenant_token(name: str) -> str:
    return f"gct_{name}_" + secrets.token_urlsafe(18)


def _check(token: str, where: str) -> str:
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenError(f"{where}: the admin token must be at least {MIN_TOKEN_CHARS} characters "
                         f"(got {len(token)})")
    if len(token) > MAX_TOKEN_CHARS or any(c.isspace() for c in token) or not token.isprintable():
        raise TokenError(f"{where}: the admin token must be at most {MAX_TOKEN_CHARS} printable characters "
                         "without spaces")
    return token


def save_admin_token(data_dir: Path, token: str) -> None:
    """Write the token file (mode 0600) atomically."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = data_dir / ADMIN_TOKEN_FILE
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    os.replace(tmp, path)


def resolve_admin_token(data_dir: Path, configured: str | None) -> AdminToken:
    """The admin token and where it came from; :class:`TokenError` if the configured one is unusable."""
    if configured:
        return AdminToken(_check(configured, "--admin-token"), "flag")
    env = os.environ.get(ADMIN_ENV, "").strip()
    if env:
        return AdminToken(_check(env, f"${ADMIN_ENV}"), "env")
    saved = data_dir / ADMIN_TOKEN_FILE
    if saved.is_file():
        text = saved.read_text(encoding="utf-8").strip()
        if text:
            return AdminToken(_check(text, str(saved)), "file")
    token = new_admin_token()
    save_admin_token(data_dir, token)
    return AdminToken(token, "generated")


def authenticate(store: Store, header: str) -> Principal:
    """The caller from an ``Authorization`` header value; :class:`ApiError` 401 with the reason otherwise."""
    if not header:
        raise ApiError(401, "headers.Authorization", "missing bearer token (Authorization: Bearer <token>)",
                       {"WWW-Authenticate": "Bearer"})
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "headers.Authorization", "expected 'Bearer <token>'", {"WWW-Authenticate": "Bearer"})
    found = store.lookup_token(token) if len(token) <= MAX_TOKEN_CHARS else None
    if found is None:
        raise ApiError(401, "headers.Authorization", "unknown token", {"WWW-Authenticate": "Bearer"})
    return Principal(found[0], found[1])


__all__ = [
    "ADMIN_ENV",
    "ADMIN_TOKEN_FILE",
    "MAX_TOKEN_CHARS",
    "MIN_TOKEN_CHARS",
    "AdminToken",
    "Principal",
    "TokenError",
    "authenticate",
    "new_admin_token",
    "new_tenant_token",
    "resolve_admin_token",
    "save_admin_token",
]
