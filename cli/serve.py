"""`hpcmem serve`: the lab lead's web console (review queue, lessons, trends) on a local port.

starlette, jinja2 and uvicorn come with the `web` extra and are imported only here, inside
the command, so `hpcmem --help` and recall never load them.
"""

from __future__ import annotations

import getpass
import sys
from typing import Optional

import typer

from hpcmem.cli._output import stderr
from hpcmem.cli._state import STATE


def serve(
    host: str = typer.Option("127.0.0.1", "--host", envvar="HPCMEM_SERVE_HOST",
                             help="Address to listen on; anything but loopback needs --allow-remote."),
    port: int = typer.Option(0, "--port", envvar="HPCMEM_SERVE_PORT", help="Port (0: any free port)."),
    scope: Optional[str] = typer.Option(None, "--scope", help="Only this store: lab:NAME or cluster (default: all)."),
    allow_remote: bool = typer.Option(False, "--allow-remote",
                                      help="Allow a non-loopback --host (put TLS in front: docs/web-console.md)."),
    root_path: str = typer.Option("", "--root-path", envvar="HPCMEM_SERVE_ROOT_PATH",
                                  help="URL prefix a reverse proxy serves the console under (Open OnDemand)."),
    ssl_certfile: Optional[str] = typer.Option(None, "--ssl-certfile", envvar="HPCMEM_SERVE_SSL_CERTFILE",
                                               help="Serve HTTPS with this certificate (PEM)."),
    ssl_keyfile: Optional[str] = typer.Option(None, "--ssl-keyfile", envvar="HPCMEM_SERVE_SSL_KEYFILE",
                                              help="Private key of --ssl-certfile."),
) -> None:
    """Run the web console for lab leads; open the printed URL (it carries the access token)."""
    from hpcmem.cli.web.server import access_token, bind, check_bind, url_for
    from hpcmem.kb.errors import InputError

    check_bind(host, allow_remote)
    if bool(ssl_certfile) != bool(ssl_keyfile):
        raise InputError("--ssl-certfile and --ssl-keyfile go together")
    try:
        from hpcmem.cli.web.app import Console, create_app
        from hpcmem.cli.web.server import run
    except ImportError as exc:
        raise InputError(f"the web console needs the 'web' extra ({exc.name} is missing)",
                         hint="pip install 'hpcmem[web]'") from None
    if scope:
        STATE.stack.by_scope(scope)  # an unknown scope is an error now, not on the first page
    console = Console(stack=STATE.stack, config=STATE.config, actor=getpass.getuser(), scope=scope,
                      secure_cookie=bool(ssl_certfile))
    console.token = access_token() or console.token
    sock = bind(host, port)
    console.cookie_name = f"hpcmem_console_{sock.getsockname()[1]}"  # two consoles on one host keep apart
    url = url_for(host, sock.getsockname()[1], root_path, console.token, tls=bool(ssl_certfile))
    sys.stdout.write(url + "\n")
    sys.stdout.flush()
    stderr.print("hpcmem console: open the URL above (it carries this process's access token); Ctrl-C stops it")
    run(create_app(console), sock, root_path=root_path, ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile)
