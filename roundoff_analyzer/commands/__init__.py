"""What each `roundoff` command does once its options are read, a module per command: a request (the options as
given, one field each) and the function that runs it, checks it, calls the API and prints to the terminal. The command
line (`cli/`, installed as `roundoff_cli`) declares the options and hands their request here; it imports nothing else
of the package but `roundoff_analyzer` and `roundoff_analyzer.plugins`.

Importing this package is cheap, as `roundoff --help` needs: torch, pandas and matplotlib load when a command runs.
"""

from __future__ import annotations

from ..axes.names import axis_names
from ..axes.scaler_settings import ScalerSettings
from ..judging.check_defaults import DEFAULT_FACTOR, DEFAULT_FLOOR_U
from .check import CheckRequest, check_command
from .list_axes import ListRequest, list_command
from .report import ReportRequest, report_command
from .show import ShowRequest, show_command
from .sweep import SLURM_TIME_FORMS, SWEEP_FIELDS, SweepRequest, sweep_command
from .train import TRAIN_FIELDS, TrainRequest, train_command

# The defaults --help shows, read from the settings' own definitions (pydantic fields; no torch).
SCALER_FIELDS = ScalerSettings.model_fields

__all__ = [
    "DEFAULT_FACTOR",
    "DEFAULT_FLOOR_U",
    "SCALER_FIELDS",
    "SLURM_TIME_FORMS",
    "SWEEP_FIELDS",
    "TRAIN_FIELDS",
    "CheckRequest",
    "ListRequest",
    "ReportRequest",
    "ShowRequest",
    "SweepRequest",
    "TrainRequest",
    "axis_names",
    "check_command",
    "list_command",
    "report_command",
    "show_command",
    "sweep_command",
    "train_command",
]
