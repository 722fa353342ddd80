"""What a plan writes into `manifest.json`: its fingerprint (what decides the numbers: a folder holding another one is
another sweep), the settings its rows depend on, and how and with what it was run."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import importlib.metadata
import json
import platform
import subprocess
from dataclasses import asdict
from pathlib import Path

import torch

from ..axes.methods import METHODS
from ..axes.models import ModelProblem, TrajectoryProblem
from ..axes.models.inputs import tensors_with_names
from ..core.devices import describe
from ..core.user_code import source_sha256
from ..core.version import __version__
from ..measuring.environment_columns import device_details
from .sweep_plan import SweepPlan


def timestamp() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def manifest(plan: SweepPlan) -> dict:
    """`manifest.json` as a sweep starts: what decides the numbers (the fingerprint), how it is run, and the
    versions."""
    config = plan.config
    grid = {
        "timesteps": list(plan.grid.timesteps),
        "methods": list(plan.grid.methods),
        "modes": list(plan.grid.modes),
        "library_dtype_scaling": [list(t) for t in plan.grid.triples],
        "description": plan.grid.describe(),
    }
    if plan.grid.kept != ("none",):
        # Only where modules are kept in float32, so that folders from before the axis still resume.
        grid["keep_float32"] = list(plan.grid.kept)
    model = {
        "name": plan.model.name,
        "description": plan.model.description,
        "options": plan.options.model_dump(mode="json"),
    }
    # What decides the numbers; a folder holding another fingerprint is a different sweep. The problem's
    # hash covers what the options do not: the data file's rows and a checkpoint's weights.
    # A value given twice is the same sweep as given once: the fingerprint's description leaves the repeats out.
    fingerprint = {
        "model": model,
        "grid": {**grid, "description": plan.grid.describe(repeats=False)},
        "device": plan.device.type,
        "repeats": config.repeats,
        "scaler": config.scaler.model_dump(mode="json"),
        "loss_scale": config.loss_scale,
        "noise_batches": config.noise_batches,
        "problem_sha256": problem_hash(plan.problem),
    }
    noise_batch_sizes = [plan.noise_batch_size(name) for name in plan.grid.checkpoints]
    if any(size is not None for size in noise_batch_sizes):
        # Only where the noise is drawn at another batch than the sweep's, so that folders from before still resume.
        fingerprint["noise_batch_size"] = noise_batch_sizes
    if len(plan.checkpoints) > 1:
        # Only for several checkpoints, so that folders of a single one still resume; the path does not decide the
        # numbers.
        fingerprint["checkpoints"] = [
            {k: c.record[k] for k in ("name", "sha256", "iteration")} for c in plan.checkpoints
        ]
    if not plan.grid.default_loss_in:
        # Only where another placement is asked for, so that folders from before the loss_in axis still resume.
        grid["loss_in"] = fingerprint["loss_in"] = list(plan.grid.loss_ins)
    if plan.shape.draws is not None:
        # Only for a step that draws random numbers, so that other folders still resume: its rows measured before
        # every run was given its reference's draws (measuring/draws.py) are another sweep's.
        fingerprint["draws"] = plan.shape.draws
    if any(METHODS.get(name).adaptive for name in plan.grid.methods):
        fingerprint["step_control"] = {"rtol": config.rtol, "atol": config.atol, "max_steps": config.max_steps}
    if not plan.grid.default_precision:
        # Only where the arithmetic axis is used, so that folders from before it still resume.
        grid["arithmetic"] = list(plan.grid.arithmetics) if plan.grid.arithmetics else "each dtype's default"
        grid["rounding"] = list(plan.grid.roundings)
        fingerprint["fp8_scaling"] = config.fp8_scaling
    return {
        "tool": "roundoff-analyzer",
        "created_at": timestamp(),
        "fingerprint": fingerprint,
        "settings": row_settings(plan),
        "model": model,
        "data": config.data or plan.model.default_data,
        "data_source": plan.problem.data_source,
        "problem": {
            "form": plan.problem.form,
            **asdict(plan.shape),
        },
        "checkpoint": plan.checkpoint,
        "checkpoints": [c.record for c in plan.checkpoints],
        "grid": grid,
        "n_configurations": len(plan.configurations),
        "seed": plan.options.seed,
        "device": str(plan.device),
        "device_description": describe(plan.device)
        if plan.executor.runs_here
        else f"{plan.device} on the {plan.executor.name} executor's nodes",
        # The card's facts and the TF32 switches, where the sweep runs here (a Slurm node's are its own).
        **({"device_details": device_details(plan.device)} if plan.executor.runs_here else {}),
        "execution": {
            **plan.executor.settings(config),
            **({"workers_reason": plan.workers_reason} if plan.workers_reason else {}),
            **(plan.threads.as_dict() if plan.threads else {}),
        },
        "repeats": config.repeats,
        "timeout_s": config.timeout,
        "cpu_memory": config.cpu_memory,
        "scaler": config.scaler.model_dump(mode="json"),
        "fp8_scaling": config.fp8_scaling,
        "per_module": config.per_module,
        "versions": _versions(),
    }


def row_settings(plan: SweepPlan) -> dict:
    """What a row depends on beyond the fingerprint: the time limit and the CPU memory measurement (which decide
    whether a row is a timeout or has a peak memory) and the content of the user's code the sweep loads (a factory
    file edited between two runs builds another vector field). Kept out of the fingerprint, so that a change sets
    the shards it concerns aside rather than refusing the folder; the data file and the weights are in the
    fingerprint's problem hash, and a config file's values are these settings and the fingerprint's."""
    user_code = {spec: source_sha256(spec) for spec in [plan.model.name, *(plan.config.library or [])] if ":" in spec}
    settings = {"timeout_s": plan.config.timeout, "cpu_memory": plan.config.cpu_memory, "user_code": user_code}
    if plan.config.per_module:
        # Only when on, so that shards from before the option still count: a shard without the module rows is set aside
        # and measured again once they are asked for (and one with them, once they are not).
        settings["per_module"] = True
    return json.loads(json.dumps(settings))


def fingerprint(plan: SweepPlan) -> dict:
    """What decides the numbers, as `manifest.json` stores it: a worker that rebuilt the plan checks it against the
    folder's."""
    return json.loads(json.dumps(manifest(plan)["fingerprint"]))


def problem_hash(problem: ModelProblem) -> str:
    """The weights and the batch, bit for bit: the same in every process that rebuilds the sweep's problem."""
    digest = hashlib.sha256()
    batch = tensors_with_names(problem.sample_batch(0), "y0" if isinstance(problem, TrajectoryProblem) else "batch")
    for name, tensor in [*batch, *problem.model.state_dict().items()]:
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _versions() -> dict:
    return {
        "roundoff-analyzer": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchdiffeq": importlib.metadata.version("torchdiffeq"),
        "cuda": torch.version.cuda,
        "platform": platform.platform(),
        "git_revision": _git_revision(),
        **_optional_versions(),
    }


def _optional_versions() -> dict:
    """Versions of the optional solver packages installed here."""
    versions = {}
    for package in ("torchode", "torchdyn", "rampde"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[package] = importlib.metadata.version(package)
    return versions


def _git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
