"""`roundoff report`: write a sweep folder's markdown report and figures."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from ..core.text import printable
from .terminal import reports_input_errors


@dataclass(frozen=True)
class ReportRequest:
    """`roundoff report`'s folder and options as given."""

    folder: Path
    out: Path | None


@reports_input_errors
def report_command(request: ReportRequest) -> None:
    """Write the report of the request's folder: a sweep's, a training's, or a watch's."""
    folder, out = request.folder, request.out
    # Here, not at the top: pandas, matplotlib and torch load only when a report is written.
    from ..core.safe_files import refuse_links
    from ..report import FIGURES, REPORT, write_report
    from ..storage.result_schemas import RESULTS
    from ..training.folder import REPORT as TRAINING_REPORT
    from ..training.folder import TRAIN_MANIFEST
    from ..training.training_report import write_training_report
    from ..training.watch_folder import WATCH_MANIFEST, WATCH_REPORT
    from ..training.watch_report import write_watch_report

    sweep = (folder / RESULTS).is_file()
    write: Callable[[Path, Path | None], Path]
    if (folder / WATCH_MANIFEST).is_file() and not sweep:
        name, write = WATCH_REPORT, write_watch_report
    elif (folder / TRAIN_MANIFEST).is_file() and not sweep:
        name, write = TRAINING_REPORT, write_training_report
    else:
        name, write = REPORT, write_report
    # written into the folder: never through a link out of it
    refuse_links(folder, [FIGURES] + ([] if out else [name]))
    written = write(folder, out)
    Console(highlight=False, soft_wrap=True, emoji=False).print(
        printable(f"report: {written} (figures in {folder / FIGURES})"), markup=False
    )
