"""What every section of the report reads: the sweep folder at the checkpoint it judges, and its results as the
sections read them."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from .sweep_folder import SweepFolder


@dataclass(frozen=True)
class SectionInputs:
    """The tables a section words its sentences from.

    Attributes:
        sweep: The sweep folder cut down to the checkpoint the report judges (the whole folder for one set of weights).
        every_checkpoint: The results of every checkpoint, for the sections that follow training.
        judged: The judged checkpoint's results, each loss placement in its own column (the answer and the verdict).
        results: The judged results with each loss placement read as a mode (the detail sections).
        with_mode: Whether the results hold more than one mode, so that labels name it.
        figures: A figure's name to its PNG and SVG paths relative to the report.
    """

    sweep: SweepFolder
    every_checkpoint: pd.DataFrame
    judged: pd.DataFrame
    results: pd.DataFrame
    with_mode: bool
    figures: dict[str, tuple[str, str]]
