"""How `colibri serve` stops: SIGTERM as Ctrl-C (drain, close, exit 0), and a busy port said in one line.

Role in the data flow: cli/serve.py calls `stop_on_sigterm()` before it opens the model and again once it
serves (ray.init replaces the SIGTERM handler with one that exits 15 mid-flight), and `check_port(...)`
before the model loads (a model load can take minutes; a taken port is known at once). The first SIGTERM
raises KeyboardInterrupt in the main thread, which the serving loops already treat as the stop (uvicorn
finishes the requests in flight, the engine and its process, runners and pool close); a second one while
that drain runs is ignored, so the drain is not cut into a traceback (SIGKILL still ends it). The engine
process ignores both signals (`ignore_stop_signals`): its parent stops it through the pipe.
"""
import errno
import signal
import socket
import threading

from ..errors import InvalidArgument


def stop_on_sigterm():
    """From now on SIGTERM stops this server as Ctrl-C does (main thread only; elsewhere nothing)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _first_sigterm)


def _first_sigterm(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def ignore_stop_signals():
    """In the engine process: Ctrl-C on the terminal (its whole process group) or a SIGTERM is the parent's
    to act on; the child ends when the parent closes it or goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def check_port(host, port, flag="--port"):
    """InvalidArgument naming the flag when host:port cannot be bound (taken, or not this machine's)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)     # as uvicorn binds
        sock.bind((host, port))
    except OSError as exc:
        why = "is already in use (another server?)" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc})"
        raise InvalidArgument(f"{flag} {port}: {host}:{port} {why}; pick another {flag} or stop what holds it",
                              parameter="port", value=port) from None
    finally:
        sock.close()
