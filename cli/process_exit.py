"""How the `roundoff` command ends: as `sys.exit` would, less the interpreter's teardown.

With torch loaded, freeing every module and object at exit takes most of a second (0.45 s after `import torch` alone,
about 1 s after a sweep on this project's 2-core machine) once the command's work is done and its files are closed.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import NoReturn


def exit_without_teardown(code: object) -> NoReturn:
    """End the process with the status `sys.exit(code)` gives. What an ordinary exit does for others still happens:
    the atexit handlers run (multiprocessing's, which ends the fork server's bookkeeping, and any a user's model
    registered) and the standard streams are flushed; only the freeing of modules is skipped."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): the message on stderr, status 1
        print(code, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        # A reader that went away (`| head`), or a stream already closed, leaves nothing to flush to.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)
