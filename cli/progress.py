"""The sweep's progress bar, shared with the Python API (which shows it in notebooks too)."""

from roundoff_analyzer.execution.progress_bar import STATUS_STYLE, RichProgress

__all__ = ["STATUS_STYLE", "RichProgress"]
