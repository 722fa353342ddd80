"""The first lines of the answer's code: the model, its loss (or step) and its batches as the sweep measured them, built
by `roundoff_analyzer.model` from what the manifest records (a built-in model by its name, a user's factory by the
`path/to/file.py:factory` or `package.module:factory` the sweep was given, relative where it was, so the code runs from
the folder the sweep ran in), and the torch threads the sweep measured with where the process's own count differed. The
code is then a script of its own that runs as handed."""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ...axes.models import MODELS
from ...axes.models.problem import recorded_as_step
from ...judging.seeds import seeds_of
from ..along_training_findings import last_checkpoint
from ..seed_words import seeds_named

# The longest line written: the terminal prints the code indented by 4, within 100 columns.
_WIDTH = 92


@dataclass(frozen=True)
class ModelCode:
    imports: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()

    def around(self, imports: list[str]) -> list[str]:
        """This code's imports and then `imports` (the answer's own), each once, then this code's lines."""
        return [*dict.fromkeys([*self.imports, *imports]), *self.lines]


def measured_model_code(
    manifest: dict | None, results: pd.DataFrame | None = None, seed: int | None = None
) -> ModelCode:
    """The code that builds what the sweep measured, for a built-in model (`results`: to find the checkpoint the
    answer judges, in a sweep over several; `seed`: of a sweep over several initialisations, the one the answer's setup
    was judged on, which the code builds and says so)."""
    manifest = manifest or {}
    model = _mapping(manifest.get("model"))
    name, options = model.get("name"), model.get("options")
    if not isinstance(name, str) or not isinstance(options, dict):
        return ModelCode()
    seeds = seeds_of(results) if results is not None else []
    judged_on = []
    if seed is not None and len(seeds) > 1 and "seed" in options:
        options = {**options, "seed": seed}
        judged_on = _wrapped_comment(
            f"# seed={seed}: the initialisation this setup was judged on, its worst of {seeds_named(seeds)} (your "
            "training draws its own)"
        )
    built_in = name in MODELS.names()
    if not built_in and not _factory_spec(name):
        return ModelCode()
    arguments = [_literal(name), *(f"{key}={_literal(value)}" for key, value in options.items())]
    data = manifest.get("data")
    if isinstance(data, str) and built_in and data != MODELS.get(name).default_data:
        arguments.append(f"data={_literal(data)}")
    checkpoint = _checkpoint_path(manifest, _judged_checkpoint(results))
    if checkpoint is not None:
        arguments.append(f"checkpoint={_literal(checkpoint)}")
    device = manifest.get("device")
    if isinstance(device, str) and device != "cpu":
        arguments.append(f"device={_literal(device)}")
    noise_batches = _mapping(manifest.get("fingerprint")).get("noise_batches")
    count = str(noise_batches) if isinstance(noise_batches, int) and noise_batches > 0 else ""
    step = recorded_as_step(manifest.get("problem"))
    parts, attributes = (
        ("model, step", "problem.model, problem.step") if step else ("func, loss_fn", "problem.func, problem.loss")
    )
    batches = f"batches 1 to {count} of its data" if count else "its batches from 1 on"
    batches_code = f"problem.batches({count})"
    if not built_in and not step:
        # A factory's (func, y0, loss) may draw no batch beyond y0 (no sample_batch): y0 is trained on first.
        batches, batches_code = f"y0, then {batches} where it draws them", f"[problem.y0, *problem.batches({count})]"
    said = (
        f"# as this sweep built them: the model, its loss and {batches}"
        if built_in
        else f"# your factory, imported from {name.rpartition(':')[0]} as this sweep imported it (run this from the "
        f"folder the sweep ran in), built as the sweep built it (torch seeded with its seed): {batches}"
    )
    return ModelCode(
        ("import torch", "import roundoff_analyzer"),
        (
            *_threads_line(manifest),
            *_wrapped_comment(said),
            *judged_on,
            *_call("problem = roundoff_analyzer.model(", arguments),
            f"{parts}, batches = {attributes}, {batches_code}",
            # What the sweep did not measure is the user's to choose; these let the lines below run as they are.
            f"optimizer = torch.optim.Adam({'model' if step else 'func'}.parameters())  # yours: the sweep chose none",
            'max_norm = float("inf")  # yours, if you clip (inf clips nothing)',
        ),
    )


def _factory_spec(name: str) -> bool:
    """Whether `name` names a user's factory (`path/to/file.py:factory`, `package.module:factory`)."""
    module, colon, factory = name.rpartition(":")
    return bool(colon and module and factory.isidentifier())


def _wrapped_comment(comment: str) -> list[str]:
    """A comment on lines of the code's width."""
    return textwrap.wrap(comment, _WIDTH, subsequent_indent="# ", break_long_words=False, break_on_hyphens=False)


def _call(opening: str, arguments: list[str]) -> list[str]:
    """`opening` and its arguments on one line where it fits the code's width, else the arguments on lines of their
    own filled up to it: a code line stays whole in a report and in a 100-column terminal."""
    one_line = f"{opening}{', '.join(arguments)})"
    if len(one_line) <= _WIDTH:
        return [one_line]
    lines, current = [opening], ""
    for argument in arguments:
        candidate = f"{current} {argument}," if current else f"    {argument},"
        if current and len(candidate) > _WIDTH:
            lines.append(current)
            candidate = f"    {argument},"
        current = candidate
    return [*lines, current, ")"]


def _threads_line(manifest: dict) -> list[str]:
    """torch's thread count as the sweep measured, on a CPU, where the process began with another (or the manifest
    does not say what it began with)."""
    execution = _mapping(manifest.get("execution"))
    threads, default = execution.get("threads"), execution.get("threads_default")
    if str(manifest.get("device", "cpu")).startswith("cuda") or not isinstance(threads, int) or threads == default:
        return []
    said = f" (torch's default there: {default})" if isinstance(default, int) else ""
    return [f"torch.set_num_threads({threads})  # as this sweep measured{said}"]


def _judged_checkpoint(results: pd.DataFrame | None) -> str | None:
    """The checkpoint the answer judges: the rows' one, or of a sweep's several the last in training."""
    if results is None or "checkpoint" not in results.columns:
        return None
    names = {name for name in results["checkpoint"] if isinstance(name, str) and name}
    return names.pop() if len(names) == 1 else last_checkpoint(results)


def _checkpoint_path(manifest: dict, judged: str | None) -> str | None:
    """The weights file the answer is judged on: the one checkpoint, or of several the judged one."""
    records = [r for r in manifest.get("checkpoints") or [] if isinstance(r, dict)]
    if judged is not None:
        records = [r for r in records if r.get("name") == judged]
    elif isinstance(manifest.get("checkpoint"), dict):
        records = [manifest["checkpoint"]]
    path = records[0].get("path") if len(records) == 1 else None
    return path if isinstance(path, str) else None


def _mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _literal(value: Any) -> str:
    """`value` as Python source: a string in double quotes, as the rest of the answer's code writes them."""
    return json.dumps(value) if isinstance(value, str) else repr(value)
