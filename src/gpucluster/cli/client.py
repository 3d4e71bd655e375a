"""Talking to a running control plane: where it is, which token, and one call with errors in where+why form.

The server and token come from, first to last: ``--server``/``--token``; the context named by ``--context``;
``$GPUCLUSTER_SERVER``/``$GPUCLUSTER_TOKEN``; the current context of the config file
(``$GPUCLUSTER_CONFIG``, default ``~/.config/gpucluster/config.yaml``, written by ``gpucluster config
set-context``); then ``http://127.0.0.1:8080`` and, for a server on this machine, the admin token that
``gpucluster up`` saved in its data directory (``$GPUCLUSTER_DATA_DIR``, default ``~/.gpucluster``).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

import typer

from gpucluster.cli.common import fail

# httpx (which loads rich), YAML and the file reader are imported where used: about 0.3 s of CPU that Tab completion
# of a client command's arguments needs none of (issue 32)
if TYPE_CHECKING:
    import httpx

DEFAULT_SERVER = "http://127.0.0.1:8080"
SERVER_ENV = "GPUCLUSTER_SERVER"
TOKEN_ENV = "GPUCLUSTER_TOKEN"
CONFIG_ENV = "GPUCLUSTER_CONFIG"
DATA_DIR_ENV = "GPUCLUSTER_DATA_DIR"

ServerOpt = Annotated[str | None, typer.Option(
    "--server", help=f"Control plane URL (else the context's, ${SERVER_ENV}, or {DEFAULT_SERVER}).",
    rich_help_panel="Connection")]
TokenOpt = Annotated[str | None, typer.Option(
    "--token", help=f"Bearer token (else the context's or ${TOKEN_ENV}; for a local server, the admin token "
                    "`gpucluster up` saved).", rich_help_panel="Connection")]
ContextOpt = Annotated[str | None, typer.Option(
    "--context", help="Use this context of the config file (`gpucluster config set-context`).",
    rich_help_panel="Connection")]


def config_path() -> Path:
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpucluster" / "config.yaml"


def load_config(path: Path | None = None) -> dict[str, Any]:
    """The config file (``{"current-context": name, "contexts": {name: {"server", "token"}}}``); empty if absent.
    A file that is not such a mapping exits 2 naming it."""
    from gpucluster import inputfile

    path = path or config_path()
    if not path.exists() and not path.is_symlink():
        return {"contexts": {}}
    try:
        doc = inputfile.load_yaml(path)
    except inputfile.InputFileError as exc:
        fail(str(exc))
    if doc is None:
        return {"contexts": {}}
    if not isinstance(doc, dict) or not isinstance(doc.get("contexts", {}), dict):
        fail(f"{path}: expected a mapping with 'contexts' (name -> server, token) and 'current-context'")
    doc.setdefault("contexts", {})
    for name, ctx in doc["contexts"].items():
        if not isinstance(ctx, dict):
            fail(f"{path}: contexts.{name}: expected a mapping with server and token")
    return doc


def save_config(doc: dict[str, Any], path: Path | None = None) -> Path:
    """Write the config file (mode 0600: it holds tokens)."""
    import yaml

    path = path or config_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            yaml.safe_dump(doc, fh, sort_keys=False)
        os.chmod(path, 0o600)
    except OSError as exc:
        fail(f"{path}: {exc.strerror}")
    return path


def server_url_error(url: str) -> str | None:
    """Why ``url`` is no control-plane URL (``http[s]://HOST[:PORT][/PATH]``), or None when it is one."""
    if not url.startswith(("http://", "https://")):
        return "expected an http:// or https:// URL"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is no number or out of range
    except ValueError as exc:
        return f"not a URL ({exc})"
    if not parts.hostname:
        return "no host in the URL"
    del port
    return None


def _is_local(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _saved_admin_token() -> str | None:
    from gpucluster import inputfile

    data = Path(os.environ.get(DATA_DIR_ENV) or Path.home() / ".gpucluster")
    try:
        text = inputfile.read_text(data / "admin-token", max_bytes=4096).strip()
    except inputfile.InputFileError:
        return None
    return text or None


@dataclass(frozen=True, slots=True)
class Connection:
    server: str
    token: str
    source: str
    """Where the token came from (for error messages): flag, context NAME, env, data dir."""


def resolve(server: str | None, token: str | None, context: str | None = None) -> Connection:
    """Server and token by the precedence in the module's docstring; no token at all exits 2 saying how to
    give one."""
    doc = load_config() if context is not None or not (server and token) else {"contexts": {}}
    ctx: dict[str, Any] = {}
    ctx_name = context or doc.get("current-context")
    if context is not None:
        if context not in doc["contexts"]:
            known = ", ".join(sorted(doc["contexts"])) or "none"
            fail(f"--context: no context {context!r} in {config_path()} (known: {known})")
        ctx = doc["contexts"][context]
    elif ctx_name and ctx_name in doc["contexts"]:
        ctx = doc["contexts"][ctx_name]
    env_server, env_token = os.environ.get(SERVER_ENV), os.environ.get(TOKEN_ENV)
    from_ctx = (ctx.get("server"), f"context {ctx_name}")
    from_env = (env_server, f"${SERVER_ENV}")
    if context is not None:  # an explicit context wins over the environment
        order = [(server, "--server"), from_ctx, from_env]
        tok, src = (token, "--token") if token else (ctx.get("token"), f"context {context}")
    else:
        order = [(server, "--server"), from_env, from_ctx]
        if token:
            tok, src = token, "--token"
        elif env_token:
            tok, src = env_token, f"${TOKEN_ENV}"
        else:
            tok, src = ctx.get("token"), f"context {ctx_name}"
    url, came = next(((str(u), w) for u, w in order if u), (DEFAULT_SERVER, "the default server"))
    bad = server_url_error(url)
    if bad is not None:  # before the token: a URL that cannot be used is the first thing to fix
        fail(f"{came} {url!r}: {bad}")
    url = url.rstrip("/")
    if not tok and _is_local(url):
        tok, src = _saved_admin_token(), "the admin token saved by gpucluster up"
    if not tok:
        fail(f"--token: missing (give --token, set ${TOKEN_ENV}, or save one with "
             f"`gpucluster config set-context NAME --server URL --token T`)")
    return Connection(url, str(tok), src)


def client(conn: Connection) -> httpx.Client:
    import httpx

    return httpx.Client(base_url=conn.server, headers={"Authorization": f"Bearer {conn.token}"}, timeout=30.0)


def send(http: httpx.Client, method: str, path: str, **kw: Any) -> httpx.Response:
    """One request and its response, whatever its status (for a caller that reads a 404 itself); an unreachable
    server exits 2 naming it."""
    import httpx

    try:
        return http.request(method, path, **kw)
    except httpx.HTTPError as exc:
        fail(f"--server: cannot reach {http.base_url}: {exc}")


def call(http: httpx.Client, method: str, path: str, **kw: Any) -> Any:
    """One request; 4xx exits 2 and 5xx exits 1, both with ``where: why (HTTP code)``; an unreachable server
    exits 2 naming it."""
    resp = send(http, method, path, **kw)
    try:
        body = resp.json()
    except ValueError:
        body = {"error": resp.text[:200]}
    if resp.status_code >= 400:
        where = body.get("where") if isinstance(body, dict) else None
        why = body.get("error") if isinstance(body, dict) else str(body)
        fail(f"{where}: {why} (HTTP {resp.status_code})" if where else f"{why} (HTTP {resp.status_code})",
             2 if resp.status_code < 500 else 1)
    return body


__all__ = ["CONFIG_ENV", "DEFAULT_SERVER", "SERVER_ENV", "TOKEN_ENV", "Connection", "ContextOpt", "ServerOpt",
           "TokenOpt", "call", "client", "config_path", "load_config", "resolve", "save_config", "send",
           "server_url_error"]
