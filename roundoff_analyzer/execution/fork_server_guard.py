"""Imported by the fork server only (start_method.PRELOAD; nothing else imports it): the server ends when the process
that started it ends, however that one ended, and its workers with it (each asked the kernel to end it with its parent,
parent_death.py). Without this, a server whose sweep was killed and not reaped went on handing out workers.

The server must have no threads when it forks, so only the kernel's signal is used here (Linux); elsewhere the
server ends when it reads the end of the pipe the sweep held, as multiprocessing arranges.

The server was started on the sweep's own sys.path through two environment variables (server_environment.py); they
are put back here as the sweep had them."""

from __future__ import annotations

import os

from .parent_signal import kernel_signal_on_parent_death
from .server_environment import put_back

_started_by = os.getppid()
if kernel_signal_on_parent_death() and os.getppid() != _started_by:  # the sweep died before the signal was asked for
    os._exit(1)
put_back()
