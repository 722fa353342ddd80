"""The cores this process may run on, without importing torch: the command line asks before it loads torch."""

from __future__ import annotations

import os


def available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
