"""tests/serve helpers (a module of its own: `conftest` is a name every test folder has)."""


def start_server(path, **options):
    """An in-process `colibri serve` on 127.0.0.1 and a free port; the caller stops it."""
    from colibri_dist.serve import Server, ServeConfig
    return Server(ServeConfig(model=path, port=0, **options)).start()
