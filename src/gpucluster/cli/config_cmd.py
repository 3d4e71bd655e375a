"""``gpucluster config``: named contexts (server + token) in a file, kubectl-style, so the client verbs need no
``--server``/``--token`` (``cli.client`` says where the file is and what wins over what)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpucluster.cli.client import config_path, load_config, save_config, server_url_error
from gpucluster.cli.common import fail
from gpucluster.cli.output import OutputFormat, print_table, write, write_machine

app = typer.Typer(help="Contexts (a server and its token) for the client commands.", no_args_is_help=True)


def _redact(token: str | None) -> str:
    if not token:
        return ""
    return token[:6] + "…" if len(token) > 10 else "…"


@app.command("set-context")
def set_context(
    name: Annotated[str, typer.Argument(help="Context name, e.g. local or prod.")],
    server: Annotated[str | None, typer.Option("--server", help="Control plane URL.")] = None,
    token: Annotated[str | None, typer.Option("--token", help="Bearer token (admin or tenant).")] = None,
    use: Annotated[bool, typer.Option("--use/--no-use", help="Make it the current context.")] = True,
) -> None:
    """Create or update a context (the file is written with mode 0600)."""
    if not name.strip():
        fail("NAME: a context needs a name (not empty)")
    bad = server_url_error(server) if server is not None else None
    if server is not None and bad is not None:
        fail(f"--server {server!r}: {bad}")
    doc = load_config()
    ctx = dict(doc["contexts"].get(name, {}))
    if server is not None:
        ctx["server"] = server.rstrip("/")
    if token is not None:
        ctx["token"] = token
    if not ctx:
        fail("give --server and/or --token")
    doc["contexts"][name] = ctx
    if use or "current-context" not in doc:
        doc["current-context"] = name
    path = save_config(doc)
    write(f"context {name!r} saved in {path}" + (" (current)" if doc["current-context"] == name else ""))


@app.command("use-context")
def use_context(name: Annotated[str, typer.Argument(help="Context name.")]) -> None:
    """Make a context the current one."""
    doc = load_config()
    if name not in doc["contexts"]:
        fail(f"no context {name!r} in {config_path()} (known: {', '.join(sorted(doc['contexts'])) or 'none'})")
    doc["current-context"] = name
    save_config(doc)
    write(f"switched to context {name!r}")


@app.command("delete-context")
def delete_context(name: Annotated[str, typer.Argument(help="Context name.")]) -> None:
    """Forget a context."""
    doc = load_config()
    if doc["contexts"].pop(name, None) is None:
        fail(f"no context {name!r} in {config_path()}")
    if doc.get("current-context") == name:
        doc.pop("current-context")
    save_config(doc)
    write(f"deleted context {name!r}")


@app.command("get-contexts")
def get_contexts(
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help="table, json or yaml (tokens "
                                                                        "redacted).")] = OutputFormat.TABLE,
) -> None:
    """List the contexts (tokens shown redacted)."""
    doc = load_config()
    current = doc.get("current-context")
    rows = [{"name": n, "current": n == current, "server": c.get("server", ""), "token": _redact(c.get("token"))}
            for n, c in sorted(doc["contexts"].items())]
    if output.machine:
        write_machine({"current-context": current, "contexts": rows}, output)
        return
    print_table(["CURRENT", "NAME", "SERVER", "TOKEN"],
                [("*" if r["current"] else "", r["name"], r["server"], r["token"]) for r in rows])


@app.command("current-context")
def current_context() -> None:
    """Print the current context's name (exit 1 when there is none)."""
    name = load_config().get("current-context")
    if not name:
        fail(f"no current context in {config_path()}", 1)
    write(str(name))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="config")
