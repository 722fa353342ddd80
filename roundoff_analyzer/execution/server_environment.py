"""The environment a fork server is started with (start_method.py): the sweep's own sys.path, in PYTHONPATH, with
PYTHONSAFEPATH keeping the working directory off it, and what those two variables were before, which the server puts
back as soon as it starts (fork_server_guard.py), so that a process a worker's code starts does not inherit them.
Standard library only: the guard imports it before torch."""

from __future__ import annotations

import json
import os

SERVER_PATH_VARIABLES = ("PYTHONSAFEPATH", "PYTHONPATH")
SAVED = "ROUNDOFF_FORK_SERVER_SAVED_ENVIRONMENT"  # their values before the server was started, as JSON


def set_for_server(path: list[str]) -> dict[str, str | None]:
    """Set the variables for a server on `path`; returns what to `restore` in this process once it has started."""
    before = {name: os.environ.get(name) for name in (*SERVER_PATH_VARIABLES, SAVED)}
    os.environ["PYTHONSAFEPATH"], os.environ["PYTHONPATH"] = "1", os.pathsep.join(path)
    os.environ[SAVED] = json.dumps({name: before[name] for name in SERVER_PATH_VARIABLES})
    return before


def restore(values: dict[str, str | None]) -> None:
    """Environment variables set to `values` (None: unset)."""
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def put_back() -> None:
    """In the server: the variables as the sweep had them."""
    if SAVED in os.environ:
        restore({**json.loads(os.environ[SAVED]), SAVED: None})
