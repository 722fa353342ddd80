"""The checkpoint axis: which weights files a sweep runs its grid on, and each one's problem.

`--checkpoint` names a weights file, a train folder (`roundoff train --out DIR`: every
`DIR/checkpoints/iter_*.pt`, in iteration order) or a comma list of both. Beside a weights file, a
sidecar `<stem>.json` may say at which training iteration it was saved (`{"iteration": 100, ...}`) and with what
batch size the training drew its batches (`"batch_size"`, or the model option `batch` of its `"options"`): the batch
the gradient noise is measured at unless `--noise-batch-size` says otherwise.
With one checkpoint the sweep is what it always was (its configurations carry no checkpoint name);
with several, each configuration names its checkpoint and the grid runs once per checkpoint.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..axes.grid import file_safe
from ..axes.models import ModelProblem, load_checkpoint
from ..core.errors import InputError
from ..core.json_files import parse_json

CHECKPOINTS_FOLDER = "checkpoints"
CHECKPOINT_GLOB = "iter_*.pt"
_ITERATION_IN_NAME = re.compile(r"iter_(\d+)\.pt")


@dataclass(frozen=True)
class CheckpointFile:
    path: Path
    name: str  # short, stable, unique within the sweep: the file's stem, or `<train folder>/<stem>`
    iteration: int | None  # from the sidecar JSON; None where the file has none
    train_batch: int | None = None  # the training's batch size, from the sidecar JSON; None where it says none


@dataclass
class SweepCheckpoint:
    """One checkpoint of a sweep, its weights loaded into a problem of its own."""

    name: str  # the configurations' `checkpoint`: "" when the sweep has a single checkpoint
    problem: ModelProblem
    record: dict[str, Any]  # name, path, sha256 and iteration, as the manifest lists them
    train_batch: int | None = None  # the batch size it was trained at, where its sidecar says

    @property
    def iteration(self) -> int | None:
        return self.record["iteration"]


def expand_checkpoints(values: str) -> list[CheckpointFile]:
    """The weights files of a comma list, in the order given (a train folder's in iteration order), each file once."""
    found: dict[Path, tuple[Path, str]] = {}
    for value in values.split(","):
        path = Path(value)
        if path.is_dir():
            folder_name = path.resolve().name
            for file in _folder_checkpoints(path):
                found.setdefault(file.resolve(), (file, f"{folder_name}/{file.stem}"))
        else:
            found.setdefault(path.resolve() if path.exists() else path.absolute(), (path, path.stem))
    named = _unique_names(list(found.values()))
    return [CheckpointFile(path, name, sidecar_iteration(path), sidecar_batch(path)) for path, name in named]


def _folder_checkpoints(folder: Path) -> list[Path]:
    """`folder/checkpoints/iter_*.pt` (or `folder/iter_*.pt` when given the checkpoints folder itself), by iteration."""
    inner = folder / CHECKPOINTS_FOLDER
    files = sorted((inner if inner.is_dir() else folder).glob(CHECKPOINT_GLOB))
    files = [f for f in files if f.is_file()]
    if not files:
        raise InputError(
            f"checkpoint '{folder}' is a folder with no checkpoints (expected "
            f"{folder / CHECKPOINTS_FOLDER / CHECKPOINT_GLOB}, "
            "as `roundoff train --out` writes them); give a weights file, a train folder or a comma list of them"
        )
    return sorted(files, key=lambda f: (_iteration_order(f), f.name))


def _iteration_order(file: Path) -> int:
    iteration = sidecar_iteration(file)
    if iteration is None:
        match = _ITERATION_IN_NAME.fullmatch(file.name)
        iteration = int(match.group(1)) if match else -1
    return iteration


def _unique_names(files: list[tuple[Path, str]]) -> list[tuple[Path, str]]:
    """Two files of the same short name are named by their paths as given; names must stay distinct as file names
    too."""
    counts: dict[str, int] = {}
    for _, name in files:
        counts[name] = counts.get(name, 0) + 1
    named = [(path, name if counts[name] == 1 else str(path.with_suffix(""))) for path, name in files]
    seen: dict[str, str] = {}
    for _, name in named:
        safe = file_safe(name)
        if safe in seen:
            raise InputError(
                f"checkpoints '{seen[safe]}' and '{name}' would share one name in the results; rename one of the files"
            )
        seen[safe] = name
    return named


def sidecar_iteration(weights: Path) -> int | None:
    """The training iteration in `<stem>.json` beside a weights file; None where there is no such file."""
    content = _sidecar(weights)
    if content is None:
        return None
    iteration = content.get("iteration") if isinstance(content, dict) else None
    if not isinstance(iteration, int) or isinstance(iteration, bool) or iteration < 0:
        raise InputError(
            f"checkpoint sidecar '{weights.with_suffix('.json')}' has no \"iteration\" that is a whole number >= 0; "
            'expected an object such as {"iteration": 100, ...}'
        )
    return iteration


def sidecar_batch(weights: Path) -> int | None:
    """The batch size the training drew, from `<stem>.json` (`batch_size`, or its model options' `batch`); None where
    it says none."""
    content = _sidecar(weights)
    if not isinstance(content, dict):
        return None
    options = content.get("options")
    value = content.get("batch_size", options.get("batch") if isinstance(options, dict) else None)
    try:
        batch = int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None
    return batch if batch is not None and batch > 0 else None


def _sidecar(weights: Path) -> Any:
    """The content of `<stem>.json` beside a weights file; None where there is no such file."""
    sidecar = weights.with_suffix(".json")
    if not sidecar.is_file():
        return None
    try:
        content = parse_json(sidecar.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"checkpoint sidecar '{sidecar}' cannot be read: {exc}") from None
    except ValueError as exc:  # JSONDecodeError, or nested too deeply to read
        where = f"{exc.msg}, line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise InputError(
            f"checkpoint sidecar '{sidecar}' is not valid JSON ({where}); "
            'expected an object such as {"iteration": 100, ...}'
        ) from None
    return content


def load_checkpoints(problem: ModelProblem, files: list[CheckpointFile], model: str) -> list[SweepCheckpoint]:
    """One problem per checkpoint, the first `problem` itself: the same batch and step, each with its weights."""
    several = len(files) > 1
    loaded = []
    for index, file in enumerate(files):
        own = problem if index == 0 else problem.with_model(copy.deepcopy(problem.model))
        record = load_checkpoint(own.model, file.path, model)
        loaded.append(
            SweepCheckpoint(
                file.name if several else "",
                own,
                {"name": file.name, **record, "iteration": file.iteration},
                file.train_batch,
            )
        )
    return loaded
