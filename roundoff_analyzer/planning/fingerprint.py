"""A sweep's fingerprint: what decides its numbers, as data, and how a folder written by an earlier version compares.

A folder whose manifest holds another fingerprint is another sweep: resuming it is refused (unless --force replaces
it), and a shard is reused only where it carries the digest of this sweep's fingerprint (storage/shard_integrity.py).
The fingerprint is versioned: version 2 names every axis and setting as a value, always (None where the grid does not
use it). Version 1 (no `version` key) held the grid's prose description and left out each key at its default, so that
folders written before that key still compared equal. Every rule for reading a version-1 fingerprint is here: a
version-1 folder is the same sweep where its fingerprint equals this sweep's in version 1's form, and its shards carry
the digest of that form.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..axes.grid import Grid
from ..axes.methods import METHODS

if TYPE_CHECKING:
    from .sweep_plan import SweepPlan

FINGERPRINT_VERSION = 2

# Version 1's grid held these lists, under these names; the others its grid had only off their defaults.
_V1_GRID_LISTS = ("timesteps", "methods", "modes", "library_dtype_scaling")


def fingerprint_of(plan: SweepPlan, problem_sha256: str) -> dict[str, Any]:
    """What decides the numbers, as `manifest.json` stores it. `problem_sha256` covers what the options do not: the
    data's rows and a checkpoint's weights (a single checkpoint's weights are the problem's; several are listed). A
    value given twice is the same sweep as given once."""
    config, grid = plan.config, plan.grid
    adaptive = any(METHODS.get(name).adaptive for name in grid.methods)
    several = len(plan.checkpoints) > 1
    found = {
        "version": FINGERPRINT_VERSION,
        "model": {"name": plan.model.name, "description": plan.model.description, "options": plan.options},
        "grid": {
            "timesteps": grid.timesteps,
            "methods": grid.methods,
            "modes": grid.modes,
            "library_dtype_scaling": grid.triples,
            "arithmetic": grid.arithmetics,  # None: each dtype's default arithmetic
            "rounding": grid.roundings,
            "loss_in": grid.loss_ins,
            "keep_float32": grid.kept,
            "checkpoints": grid.checkpoints,
        },
        "device": plan.device.type,
        "repeats": config.repeats,
        "scaler": config.scaler,
        "loss_scale": config.loss_scale,
        "noise_batches": config.noise_batches,
        "noise_batch_size": [plan.noise_batch_size(name) for name in grid.checkpoints],
        "problem_sha256": problem_sha256,
        "checkpoints": [{k: c.record[k] for k in ("name", "sha256", "iteration")} for c in plan.checkpoints]
        if several
        else [],
        # Their rows measured before every run was given its reference's draws (measuring/draws.py) are another
        # sweep's.
        "draws": plan.shape.draws,
        # Only adaptive methods control their steps; only emulated arithmetic scales a tensor into an 8-bit format.
        "step_control": {"rtol": config.rtol, "atol": config.atol, "max_steps": config.max_steps} if adaptive else None,
        "fp8_scaling": None if grid.default_precision else config.fp8_scaling,
    }
    if len(grid.seeds) > 1:
        # Each seed's weights are the factory's from that seed (the options hold the first). Written only for several
        # seeds, so that a one-seed folder compares as before.
        found["seeds"] = grid.seeds
    if plan.shape.n_solves > 1:
        # Which solve the rows' solution is: a folder that judged another (before the longest span was the default,
        # the first) is another sweep. Written only for a step of several solves, so that a one-solve folder compares
        # as before.
        found["solve_of_record"] = plan.shape.solve_of_record
    return _as_json(found)


def same_sweep(found: Any, wanted: dict[str, Any]) -> bool:
    """Whether a folder whose manifest holds the fingerprint `found` (of any version) holds the sweep `wanted` is."""
    return found == wanted or (_version(found) == 1 and found in every_version(wanted))


def differing_keys(found: Any, wanted: dict[str, Any]) -> list[str]:
    """The keys in which `found` and `wanted` differ, compared in `found`'s version (every key where `found` is not a
    fingerprint at all)."""
    if not isinstance(found, dict):
        return sorted(wanted)
    compared = every_version(wanted)[-1] if _version(found) == 1 else wanted
    return sorted(k for k in {*found, *compared} if found.get(k) != compared.get(k))


def every_version(wanted: dict[str, Any]) -> list[dict[str, Any]]:
    """`wanted` as each version writes it, this version's first: a shard carrying the digest of any of them was
    written by this sweep (a folder resumed from version 1 holds both)."""
    return [wanted, _version_1(wanted)] if _version(wanted) == FINGERPRINT_VERSION else [wanted]


def listed_grid(wanted: dict[str, Any]) -> dict[str, Any]:
    """The grid as the manifest's `grid` lists it for its readers (the report reads an axis there as used): version
    1's form, an axis named only off its default, without the description."""
    return {key: value for key, value in _version_1(wanted)["grid"].items() if key != "description"}


def _version(found: Any) -> int | None:
    if not isinstance(found, dict):
        return None
    return found.get("version", 1)


def _version_1(wanted: dict[str, Any]) -> dict[str, Any]:
    """`wanted` (this version's) as version 1 wrote it: a key off its default only, and the grid's prose description,
    which `Grid.describe` writes as it did then (its loss placements and keep_float32 said only off their defaults,
    its checkpoints only where there are several)."""
    axes = wanted["grid"]
    grid = Grid(
        timesteps=tuple(axes["timesteps"]),
        methods=tuple(axes["methods"]),
        modes=tuple(axes["modes"]),
        triples=tuple(tuple(t) for t in axes["library_dtype_scaling"]),
        arithmetics=None if axes["arithmetic"] is None else tuple(axes["arithmetic"]),
        roundings=tuple(axes["rounding"]),
        checkpoints=tuple(axes["checkpoints"]),
        loss_ins=tuple(axes["loss_in"]),
        kept=tuple(axes["keep_float32"]),
    )
    old_grid: dict[str, Any] = {key: axes[key] for key in _V1_GRID_LISTS}
    if grid.kept != ("none",):
        old_grid["keep_float32"] = axes["keep_float32"]
    old = {
        key: wanted[key]
        for key in ("model", "device", "repeats", "scaler", "loss_scale", "noise_batches", "problem_sha256")
    }
    old["grid"] = old_grid
    if any(size is not None for size in wanted["noise_batch_size"]):
        old["noise_batch_size"] = wanted["noise_batch_size"]
    if wanted["checkpoints"]:
        old["checkpoints"] = wanted["checkpoints"]
    if not grid.default_loss_in:
        old_grid["loss_in"] = old["loss_in"] = axes["loss_in"]
    if wanted["draws"] is not None:
        old["draws"] = wanted["draws"]
    if wanted["step_control"] is not None:
        old["step_control"] = wanted["step_control"]
    if not grid.default_precision:
        old_grid["arithmetic"] = axes["arithmetic"] if axes["arithmetic"] is not None else "each dtype's default"
        old_grid["rounding"] = axes["rounding"]
        old["fp8_scaling"] = wanted["fp8_scaling"]
    old_grid["description"] = grid.describe(repeats=False)
    return old


def _as_json(value: Any) -> Any:
    """`value` as it reads back from `manifest.json` (tuples as lists, a pydantic model as its JSON fields)."""
    return json.loads(json.dumps(value, default=lambda v: v.model_dump(mode="json")))
