"""``gpucluster tenants list|create|set-quota``: who may submit, with what quota (admin, against a running
control plane; ``up --tenants explicit``, the default, refuses jobs of a tenant nobody created)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpucluster.cli.client import ContextOpt, ServerOpt, TokenOpt, call, client, resolve
from gpucluster.cli.common import fail, print_json
from gpucluster.cli.output import print_table, write

app = typer.Typer(help="Tenants: list them (with quota use), create one (its token), set a quota.",
                  no_args_is_help=True)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the API's answer as JSON.")]
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="Tenant name (lower case, digits, '-').")]


@app.command("list")
def list_tenants(as_json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None,
                 context: ContextOpt = None) -> None:
    """Every tenant (a tenant's token: itself): quota, GPUs held, jobs, and QUOTA-USE ("8/4 GPUs, over quota")."""
    from gpucluster.cli.get_cmd import VIEWS, Resource

    with client(resolve(server, token, context)) as http:
        body: dict[str, Any] = call(http, "GET", "/api/v1/tenants")
    if as_json:
        print_json(body)
        return
    view = VIEWS[Resource.TENANTS]
    print_table(view.headers, [view.row(t, body)[:len(view.headers)] for t in body["tenants"]], right=view.right,
                keep=view.keep)


def _quota(text: str | None) -> float | None:
    if text is None or text.lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        fail(f"QUOTA {text!r}: expected a number of GPUs (e.g. 4 or 0.5) or none")
    if not value >= 0:
        fail(f"QUOTA {text!r}: must be 0 or more")
    return value


@app.command("create")
def create(name: NameArg,
           quota_gpus: Annotated[str | None, typer.Option(
               "--quota-gpus", metavar="GPUS", help="GPU-equivalents it may hold at once (default: no quota).")]
           = None,
           weight: Annotated[float, typer.Option("--weight", min=0.001, max=1000.0, help="Fair-share weight.")] = 1.0,
           as_json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None,
           context: ContextOpt = None) -> None:
    """Create a tenant (or reset one) and print its new token, shown once; its previous tokens are revoked."""
    with client(resolve(server, token, context)) as http:
        body: dict[str, Any] = call(http, "POST", "/api/v1/tenants",
                                    json={"name": name, "quota_gpus": _quota(quota_gpus), "weight": weight})
    if as_json:
        print_json(body)
        return
    quota = "no quota" if body["quota_gpus"] is None else f"quota {body['quota_gpus']:g} GPUs"
    write(f"tenant {body['name']} ({quota}, weight {body['weight']:g}); its token (shown once):")
    write(body["token"])


@app.command("set-quota")
def set_quota(name: NameArg,
              quota: Annotated[str, typer.Argument(metavar="GPUS", help="GPU-equivalents (e.g. 4), or none.")],
              as_json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None,
              context: ContextOpt = None) -> None:
    """Set (or with `none` remove) a tenant's GPU quota; its tokens stay. Jobs already running keep running:
    a tenant above its new quota is shown "over quota" and starts nothing new until it is back under."""
    from gpucluster.cli.get_cmd import quota_use

    with client(resolve(server, token, context)) as http:
        body: dict[str, Any] = call(http, "PATCH", f"/api/v1/tenants/{name}", json={"quota_gpus": _quota(quota)})
    if as_json:
        print_json(body)
        return
    write(f"tenant {body['name']}: {quota_use(body)}")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="tenants")
