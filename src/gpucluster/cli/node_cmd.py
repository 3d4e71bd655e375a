"""Operator actions on a running control plane: ``cordon``, ``uncordon`` and ``drain`` a node (kubectl's verbs)
and ``remediation approve|dismiss`` a planned remediation. Admin token; each is audited by the server."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpucluster.cli.client import ContextOpt, ServerOpt, TokenOpt, call, client, resolve
from gpucluster.cli.common import print_json
from gpucluster.cli.output import write

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the API's answer as JSON.")]
NodeArg = Annotated[str, typer.Argument(metavar="NODE", help="Node name (`gpucluster get nodes`).")]
RemediationArg = Annotated[str, typer.Argument(
    metavar="ID", help="A planned remediation's id (`gpucluster get remediations --planned`, column ID).")]


def _node_action(verb: str, node: str, server: str | None, token: str | None, context: str | None,
                 as_json: bool) -> None:
    with client(resolve(server, token, context)) as http:
        body = call(http, "POST", f"/api/v1/nodes/{node}/{verb}")
    if as_json:
        print_json(body)
        return
    write(body["message"])
    for job in body["jobs"]:
        who = "background" if job["synthetic"] else f"tenant {job['tenant']}"
        write(f"  job {job['id']} ({job['name']}, {who}): {job['status']}")


def cordon(node: NodeArg, as_json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None,
           context: ContextOpt = None) -> None:
    """Mark a node unschedulable: no new pods; its running jobs stay (admin). Exit 2 if already cordoned."""
    _node_action("cordon", node, server, token, context, as_json)


def uncordon(node: NodeArg, as_json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None,
             context: ContextOpt = None) -> None:
    """Put a cordoned or drained node back in service (admin). Exit 2 if it is not cordoned."""
    _node_action("uncordon", node, server, token, context, as_json)


def drain(node: NodeArg, as_json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None,
          context: ContextOpt = None) -> None:
    """Cordon a node and send every job on it back to the queue (admin).

    Each job restarts from its last checkpoint on other nodes (a gang restarts whole), as remediation's drains
    do; the jobs moved are listed. Exit 2 if the node is already cordoned and empty."""
    _node_action("drain", node, server, token, context, as_json)


remediation_app = typer.Typer(help="Planned remediation (actions `up` plans but does not carry out on its own): "
                                   "approve or dismiss one.", no_args_is_help=True)


def _decide(verb: str, rid: str, server: str | None, token: str | None, context: str | None,
            as_json: bool) -> None:
    with client(resolve(server, token, context)) as http:
        body: dict[str, Any] = call(http, "POST", f"/api/v1/remediations/{rid}/{verb}")
    if as_json:
        print_json(body)
        return
    write(f"remediation {body['id']} ({body['action']} {body['target']}) {body['decision']}: {body['detail']}")


@remediation_app.command("approve")
def approve(rid: RemediationArg, as_json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None,
            context: ContextOpt = None) -> None:
    """Carry out a planned remediation now, without restarting `up` with --remediate (admin).

    Exit 2 for an id that is not planned (its alert resolved) or was already approved or dismissed."""
    _decide("approve", rid, server, token, context, as_json)


@remediation_app.command("dismiss")
def dismiss(rid: RemediationArg, as_json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None,
            context: ContextOpt = None) -> None:
    """Drop a planned remediation: not carried out, not planned again while its alert fires (admin)."""
    _decide("dismiss", rid, server, token, context, as_json)


def register(app: typer.Typer) -> None:
    app.command("cordon")(cordon)
    app.command("uncordon")(uncordon)
    app.command("drain")(drain)
    app.add_typer(remediation_app, name="remediation")
