"""Ray token authentication for every Ray that colibri starts (issue 21 item 8).

Role: ray_setup.connect (a local in-process Ray) and service.start_local_head (the
`ray start --head` of `colibri pool start`) call ensure_token_auth() first. It makes sure a
token exists where Ray looks for one (RAY_AUTH_TOKEN, else RAY_AUTH_TOKEN_PATH, else
~/.ray/auth_token, created 0600 when missing; an existing one readable by others is
tightened to 0600) and sets RAY_AUTH_MODE=token for this process and its children, so a
process on this machine without the token cannot connect. RAY_AUTH_MODE=disabled set by
the user is an explicit opt-out and is respected. Setting the mode explicitly also keeps
Ray from warning "Token authentication is enabled" on every start.
"""
import os
import secrets

MODE = "RAY_AUTH_MODE"


def token_path():
    """Where Ray reads the token from, or None when RAY_AUTH_TOKEN holds it inline."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return None
    return os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.join(os.path.expanduser("~"), ".ray", "auth_token")


def ensure_token_auth():
    """Token auth on for Rays started from now on; returns the token file (None: inline or opted out)."""
    if os.environ.get(MODE, "").lower() == "disabled":
        return None
    path = token_path()
    if path is not None:
        _ensure_file(path)
    os.environ[MODE] = "token"
    _refresh_ray()
    return path


def _ensure_file(path):
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        st = os.stat(path)
        if st.st_uid == os.getuid() and st.st_mode & 0o077:
            os.chmod(path, 0o600)
        return
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))


def _refresh_ray():
    """Ray caches its config and token per process: make it see the mode and token just set."""
    try:
        from ray._raylet import AuthenticationTokenLoader, Config
    except ImportError:          # other Ray versions read the environment at init
        return
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
