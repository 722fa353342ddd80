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
from typing import Any

import torch

from ..axes.models import ModelProblem, TrajectoryProblem
from ..axes.models.inputs import tensors_with_names
from ..core.devices import describe
from ..core.user_code import source_sha256
from ..core.version import __version__
from ..measuring.environment_columns import device_details
from .fingerprint import fingerprint_of, listed_grid
from .sweep_plan import SweepPlan


def timestamp() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def manifest(plan: SweepPlan) -> dict:
    """`manifest.json` as a sweep starts: what decides the numbers (the fingerprint), how it is run, and the
    versions."""
    config = plan.config
    identity = fingerprint(plan)
    model = identity["model"]
    grid = {**listed_grid(identity), "description": plan.grid.describe()}
    return {
        "tool": "roundoff-analyzer",
        "created_at": timestamp(),
        "fingerprint": identity,
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
        "seeds": list(plan.grid.seeds),
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
    file edited between two runs builds another vector field): `user_code`, the file each spec names, and
    `user_files`, every other file of the user's its loading brought in (the model file beside a factory, the user's
    package), written only where a spec is the user's code so that a built-in model's shards from before it still
    count. Kept out of the fingerprint, so that a change sets the shards it concerns aside rather than refusing the
    folder; the data file and the weights are in the fingerprint's problem hash, and a config file's values are these
    settings and the fingerprint's."""
    user_code = {spec: source_sha256(spec) for spec in plan.user_specs()}
    settings: dict[str, Any] = {
        "timeout_s": plan.config.timeout,
        "cpu_memory": plan.config.cpu_memory,
        "user_code": user_code,
    }
    if plan.user_files is not None:
        settings["user_files"] = plan.user_files
    if plan.config.per_module:
        # Only when on, so that shards from before the option still count: a shard without the module rows is set aside
        # and measured again once they are asked for (and one with them, once they are not).
        settings["per_module"] = True
    return json.loads(json.dumps(settings))


def fingerprint(plan: SweepPlan) -> dict:
    """What decides the numbers, as `manifest.json` stores it (planning/fingerprint.py): a folder holding another one
    is another sweep, and a worker that rebuilt the plan checks it against the folder's."""
    return fingerprint_of(plan, problem_hash(plan.problem))


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
