"""What every command shares: one-line errors for bad input, comma-separated lists, and the consoles it prints to."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, NoReturn, ParamSpec, TypeVar

from rich.console import Console

from ..core.environment import os_error_line
from ..core.errors import InputError
from ..core.text import shortened

P = ParamSpec("P")
R = TypeVar("R")
# emoji=False on every console: rich would turn a user's `:factory:` into an emoji, markup or not.
stderr = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 1


# An error line echoes what it was given; past this it says how much it left out (a 200,000-character name stays a
# line).
MAX_LINE = 2000


def fail(message: str) -> NoReturn:
    stderr.print(f"error: {shortened(message, MAX_LINE)}", markup=False)
    raise SystemExit(EXIT_BAD_INPUT)


def reports_input_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Bad input is one line on stderr and exit 2, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except InputError as exc:
            fail(str(exc))
        except OSError as exc:  # the machine, not the request: a full disk, a read-only or forbidden path
            stderr.print(f"error: cannot go on: {os_error_line(exc)}", markup=False)
            raise SystemExit(EXIT_ENVIRONMENT) from None

    return wrapper


def split_list(value: str | None, what: str) -> list[str] | None:
    if value is None:
        return None
    items = [item.strip() for item in value.split(",")]
    if not all(items):
        raise InputError(f"--{what} '{value}' has an empty entry; give a comma-separated list such as a,b")
    return items


def split_ints(value: str | None, what: str) -> list[int] | None:
    items = split_list(value, what)
    if items is None:
        return None
    try:
        return [int(item) for item in items]
    except ValueError:
        raise InputError(f"--{what} '{value}' must be comma-separated whole numbers, such as 8,16,32") from None


def given_only(keys: dict[str, Any]) -> dict[str, Any]:
    """The keys whose value was given (not None)."""
    return {key: value for key, value in keys.items() if value is not None}


def scaler_settings(init_scale: float | None, backoff_factor: float | None, max_retries: int | None) -> dict | None:
    """The scaler's options given on the command line, as the `scaler` key's table; None without any."""
    return given_only({"init_scale": init_scale, "backoff_factor": backoff_factor, "max_retries": max_retries}) or None


def model_options(pairs: list[str]) -> dict[str, str] | None:
    """`-o key=value` options as a dict (None without any); the models' parser loads torch, so only when options are
    given."""
    if not pairs:
        return None
    from ..axes.models import parse_option_pairs

    return parse_option_pairs(pairs)


def wide_console(piped_width: int = 100) -> Console:
    """A console for tables: the terminal's width; piped, $COLUMNS or `piped_width` (the results table fits in 100)."""
    console = Console(highlight=False, emoji=False)
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(highlight=False, emoji=False, width=piped_width)
