"""``toolgate mcp serve``: the gate as an MCP server, for agents that call tools over MCP.

Serves the active release's tools (or, with ``--upstream``, an existing MCP server's tools under
the operator's policy file) over stdio, or over streamable HTTP with ``--port`` (beside the
approval API and reviewer console). Every call runs through the gateway graph as a task of the
session's authenticated principal (`toolgate.graph.mcp`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from toolgate.errors import ConfigurationError

if TYPE_CHECKING:
    from toolgate.graph.bootstrap import App

mcp_app = typer.Typer(no_args_is_help=True, help="Serve the gate to MCP clients.")


def _token(token_file: Path | None) -> str | None:
    """The stdio session's bearer token: ``--token-file``'s first line, else ``TOOLGATE_TOKEN``."""
    if token_file is not None:
        try:
            return token_file.read_text(encoding="utf-8").strip() or None
        except OSError as exc:
            raise ConfigurationError(f"--token-file {token_file}: {exc.strerror}") from exc
    from toolgate.settings import read_settings

    token = read_settings().token
    return token.get_secret_value() if token else None


def _open(upstream: str | None, policy_file: Path | None) -> App:
    from toolgate.cli.common import closed_at_exit
    from toolgate.config import Settings
    from toolgate.graph.bootstrap import open_app
    from toolgate.graph.mcp.relay import ClientCallModel

    settings = Settings.from_env()
    settings.require_store()
    if upstream is None:
        return closed_at_exit(open_app(settings, model=ClientCallModel()))
    if policy_file is None:
        raise ConfigurationError("--upstream needs --policy FILE: the operator's policy for each tool")
    from toolgate.graph.mcp.upstream import upstream_release

    release = upstream_release(upstream, policy_file)
    # pinned at load and checked before every call; there is no reviewed manifest to verify
    application = open_app(
        settings, model=ClientCallModel(), release=release, verify=False, release_control=False
    )
    return closed_at_exit(application)


@mcp_app.command("serve")
def serve(
    port: Annotated[
        int | None, typer.Option(help="Serve streamable HTTP on this port (at /mcp); default: stdio.")
    ] = None,
    host: Annotated[str, typer.Option(help="Address the HTTP server listens on.")] = "127.0.0.1",
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="HTTP: a host name clients reach this server by (repeat; default: the --host"
            " address, or the loopback names on loopback). Other Host headers are refused 421.",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file", help="stdio: file holding the session's bearer token (else TOOLGATE_TOKEN)."
        ),
    ] = None,
    wait_for_approval: Annotated[
        bool,
        typer.Option(
            "--wait-for-approval",
            help="A write's call waits, with progress notifications, until a reviewer decides.",
        ),
    ] = False,
    review_url: Annotated[
        str | None,
        typer.Option(
            "--review-url", help="Where reviewers find the console (default: this server, with --port)."
        ),
    ] = None,
    upstream: Annotated[
        str | None, typer.Option(help="Gate an existing MCP server: the command that starts it (stdio).")
    ] = None,
    policy_file: Annotated[
        Path | None, typer.Option("--policy", help="With --upstream: the operator's policy per tool (JSON).")
    ] = None,
) -> None:
    """Serve the release's tools to MCP clients; every call goes through the gate."""
    import anyio

    from toolgate.graph.mcp.calls import McpGate, ReviewPlaces
    from toolgate.graph.mcp.server import ServeOptions, allowed_hosts, http_app, serve_stdio

    hosts = allowed_hosts(host, allowed_host or ())  # refused before anything opens
    application = _open(upstream, policy_file)
    options = ServeOptions(allowed_hosts=hosts, wait_for_approval=wait_for_approval)
    base = review_url or (f"http://{host}:{port}" if port is not None else None)
    with application.graph() as graph:
        gate = McpGate(application, graph, review=ReviewPlaces(base_url=base))
        if port is None:
            token = _token(token_file)
            gate.authenticate(token)  # refused before the session starts (audited)
            anyio.run(serve_stdio, gate, token, options)
            return
        import uvicorn

        uvicorn.run(http_app(gate, options), host=host, port=port, log_level="warning")


__all__ = ["mcp_app"]
