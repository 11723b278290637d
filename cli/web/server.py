"""Binding and running the console: loopback unless the caller says otherwise, then uvicorn."""

from __future__ import annotations

import ipaddress
import os
import socket

from hpcmem.kb.errors import InputError

TOKEN_ENV = "HPCMEM_SERVE_TOKEN"  # set by launchers (Open OnDemand) that must know the token
MIN_TOKEN = 32


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def check_bind(host: str, allow_remote: bool) -> None:
    """Refuse a non-loopback address unless remote access was asked for explicitly."""
    if not is_loopback(host) and not allow_remote:
        raise InputError(f"refusing to listen on {host}: other machines could reach the console; "
                         "add --allow-remote (and put TLS in front, see docs/web-console.md)",
                         hint="the default --host 127.0.0.1 is reachable through an SSH tunnel")


def access_token() -> str | None:
    """A launcher's token from the environment (never from argv, which `ps` shows)."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        return None
    if len(token) < MIN_TOKEN:
        raise InputError(f"{TOKEN_ENV} must be at least {MIN_TOKEN} random characters")
    return token


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, bound now so the printed URL names the real port (0 = any free one)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(64)
    sock.set_inheritable(True)
    return sock


def url_for(host: str, port: int, root_path: str, token: str, tls: bool) -> str:
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{shown}:{port}{root_path.rstrip('/')}/?token={token}"


def run(app, sock: socket.socket, *, root_path: str = "", ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None) -> None:
    import uvicorn

    # No access log: the first request's URL carries the token.
    config = uvicorn.Config(app, log_level="warning", access_log=False, root_path=root_path.rstrip("/"),
                            ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile, proxy_headers=False)
    uvicorn.Server(config).run(sockets=[sock])
