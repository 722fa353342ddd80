"""The overview section: when, what, on which data and machine, and how the grid multiplies out."""

from __future__ import annotations

import re

import pandas as pd

from ...judging.seeds import seeds_of
from ...measuring.draws import grows_with_steps
from ...measuring.outcomes import Status
from .. import formatting
from ..findings import is_synthetic, sweep_timesteps
from ..section_inputs import SectionInputs
from ..seed_words import seeds_named
from ..sweep_folder import SweepFolder


def section(inputs: SectionInputs) -> list[str]:
    return overview(inputs.sweep)


def overview(sweep: SweepFolder) -> list[str]:
    manifest, results = sweep.manifest, sweep.results
    items = [
        _dates(manifest),
        _duration(manifest),
        _model(manifest, results),
        _draws(manifest),
        _data(manifest),
        _device(manifest),
        _versions(manifest),
        _settings(manifest),
        _grid(manifest, results),
        _outcome(results),
    ]
    lines = ["## Overview", ""] + [f"- {item}" for item in items if item]
    if not manifest:
        lines += [
            "",
            "manifest.json is missing or unreadable: date, model options, data, device and versions are unknown.",
        ]
    return lines


def _dates(manifest: dict) -> str | None:
    started, finished = manifest.get("created_at"), manifest.get("finished_at")
    if not started:
        return None
    return f"**Date**: started {started}" + (f", finished {finished}" if finished else " (no finish time recorded)")


def _duration(manifest: dict) -> str | None:
    seconds = manifest.get("duration_s")
    if seconds is None:
        return None
    # A resumed sweep records only its last call; the earlier calls' time is not on disk.
    return f"**Duration**: {seconds:.1f} s (wall time of the `roundoff sweep` call that finished the folder)"


def _model(manifest: dict, results: pd.DataFrame) -> str:
    model = manifest.get("model", {})
    name = model.get("name") or formatting.listing(results["model"].unique())
    options = model.get("options") or {}
    seeds = seeds_of(results)
    if len(seeds) > 1:  # the options record the first seed's: each seed built the model anew
        options = {k: v for k, v in options.items() if k != "seed"}
    settings = ", ".join(f"{k}={_option(v)}" for k, v in options.items())
    about = f" ({model['description']})" if model.get("description") else ""
    checkpoint = manifest.get("checkpoint")
    if isinstance(checkpoint, dict):  # path and sha256 of the weights loaded
        checkpoint = checkpoint.get("path") or checkpoint.get("sha256")
    several = [c for c in manifest.get("checkpoints") or [] if isinstance(c, dict)]
    if len(several) > 1:
        names = formatting.listing(f"`{c.get('name')}`" for c in several)
        weights = f"; trained weights from {len(several)} checkpoints ({names})"
    elif checkpoint:
        weights = f"; trained weights from `{checkpoint}`"
    else:  # an older manifest has no checkpoint key and says nothing about the weights
        weights = "; untrained weights (no checkpoint)" if "checkpoint" in manifest else ""
    initialisations = f"; {len(seeds)} initialisations ({seeds_named(seeds)})" if len(seeds) > 1 else ""
    return f"**Model**: `{name}`{about}" + (f"; options: `{settings}`" if settings else "") + initialisations + weights


def _draws(manifest: dict) -> str | None:
    """What the step drew and that every run was given the same draws (measuring/draws.py), where it drew."""
    draws = (manifest.get("problem") or {}).get("draws")
    if not draws:
        return None
    functions = ", ".join(f"{name} ×{count}" for name, count in (draws.get("functions") or {}).items())
    sources = [f"torch's {functions}: {formatting.plural(draws.get('numbers', 0), 'number')}"] if functions else []
    named = (("numpy", "numpy"), ("python", "Python"))
    sources += [f"{name}'s global generator" for key, name in named if draws.get(key)]
    repeats = manifest.get("repeats") or 1
    anew = "; each repeat drew anew, so the spread over repeats is the spread over draws" if repeats > 1 else ""
    finer = (
        "; with two Euler steps it drew more, so a finer grid solves another random ODE and no discretisation error "
        "is given (no fine reference solves the same problem)"
        if grows_with_steps(draws)
        else ""
    )
    return (
        f"**Random draws**: the step draws random numbers ({'; '.join(sources)} in its float64 evaluation with one "
        "Euler step per solve). Every run was given the draws of its float64 reference, drawn in float64 and cast to "
        f"the run's dtype, so its errors are roundoff, not the difference between two draws{anew}{finer}"
    )


random_draws = _draws  # the public name: the terminal's summary says it too


def _option(value) -> str:
    return (
        ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
        if isinstance(value, (list, tuple))
        else str(value)
    )


def _data(manifest: dict) -> str | None:
    source = manifest.get("data_source")
    if not source:
        return None
    if is_synthetic(source):
        detail = re.sub(r"^synthetic\s*:?\s*", "", source, flags=re.I)
        return (
            f"**Data**: **synthetic**{f' ({detail})' if detail else ''}; no data file was given, so the numbers are "
            "for synthetic inputs"
        )
    return f"**Data**: {source}"


def _device(manifest: dict) -> str | None:
    device = manifest.get("device_description") or manifest.get("device")
    return f"**Device**: {device}" if device else None


def _versions(manifest: dict) -> str | None:
    versions = manifest.get("versions") or {}
    if not versions:
        return None
    named = [f"{k} {versions[k]}" for k in ("roundoff-analyzer", "torch", "torchdiffeq", "python") if versions.get(k)]
    named += [f"CUDA {versions['cuda']}"] if versions.get("cuda") else []
    revision = versions.get("git_revision") or "none recorded"
    return f"**Versions**: {', '.join(named)}; git revision: {revision}"


def _settings(manifest: dict) -> str | None:
    parts = []
    if manifest.get("repeats") is not None:
        parts.append(f"{formatting.plural(int(manifest['repeats']), 'run')} per configuration")
    scaler = manifest.get("scaler") or {}
    if scaler:
        parts.append(
            f"loss scaler starts at {scaler.get('init_scale', formatting.MISSING):g}, multiplies by "
            f"{scaler.get('backoff_factor', formatting.MISSING):g} after a non-finite gradient, at most "
            f"{scaler.get('max_retries', formatting.MISSING)} retries"
        )
    if manifest.get("timeout_s"):
        parts.append(f"time limit {manifest['timeout_s']:g} s per configuration")
    return f"**Settings**: {'; '.join(parts)}" if parts else None


def _grid(manifest: dict, results: pd.DataFrame) -> str:
    grid = manifest.get("grid") or {}
    timesteps = grid.get("timesteps") or sweep_timesteps(results)
    methods = grid.get("methods") or list(results["method"].unique())
    modes = grid.get("modes") or list(results["mode"].unique())
    triples = grid.get("library_dtype_scaling") or [
        list(t) for t in results[["library", "dtype", "scaling"]].drop_duplicates().itertuples(index=False)
    ]
    # The arithmetic axis runs some triples more than once (hardware and emulated, nearest and stochastic).
    precision_columns = [c for c in ("library", "dtype", "scaling", "arithmetic", "rounding") if c in results.columns]
    cells = max(len(triples), len(results[precision_columns].drop_duplicates()))
    planned = len(timesteps) * len(methods) * len(modes) * cells
    text = (
        f"**Configurations**: {planned} = {len(timesteps)} n_timesteps ({formatting.listing(timesteps)}) × "
        f"{formatting.plural(len(methods), 'method')} ({formatting.listing(methods)}) × "
        f"{formatting.plural(len(modes), 'mode')} "
        f"({formatting.listing(modes)}) × {len(triples)} (library, dtype, scaling) triples: {_triples(triples)}"
    )
    if cells != len(triples) or "arithmetic" in grid:
        pairs = results[["dtype", "arithmetic", "rounding"]].drop_duplicates().itertuples(index=False)
        text += (
            f", in {cells} runs per (n_timesteps, method, mode) by dtype arithmetic rounding: "
            + formatting.bounded_listing(" ".join(p) for p in pairs)
        )
    seeds = seeds_of(results)
    if len(seeds) > 1:  # the grid ran once per initialisation
        planned *= len(seeds)
        text += f"; × {len(seeds)} seeds ({formatting.listing(seeds)}) = {planned} in all"
    if len(results) != planned:
        text += f". results.parquet holds {len(results)} of them: the sweep did not finish"
    several = [c for c in manifest.get("checkpoints") or [] if isinstance(c, dict)]
    if len(several) > 1:  # the other sections see one checkpoint's rows: the grid was run once per checkpoint
        text += (
            f"; the grid ran once for each of {len(several)} checkpoints ({planned * len(several)} in all), the "
            "counts here are the judged checkpoint's"
        )
    return text


def _triples(triples: list) -> str:
    """'torchdiffeq float16 {none, grad}, bfloat16 {none}; native …' in the order of the grid."""
    by_library: dict[str, dict[str, list[str]]] = {}
    for library, dtype, scaling in triples:
        by_library.setdefault(library, {}).setdefault(dtype, []).append(scaling)
    return "; ".join(
        f"{library} "
        + formatting.bounded_listing(f"{dtype} {{{', '.join(scalings)}}}" for dtype, scalings in dtypes.items())
        for library, dtypes in by_library.items()
    )


def _outcome(results: pd.DataFrame) -> str:
    counts = results["status"].value_counts()
    parts = [f"{int(counts[s])} {s}" for s in Status if s in counts]
    text = f"**Outcome**: {', '.join(parts)}"
    skipped = results[results["status"] == Status.SKIPPED]
    for reason, runs in skipped.groupby(skipped["skip_reason"].fillna("no reason recorded"), sort=False):
        setups = formatting.listing(
            f"{s[0]} {s[1]} {s[2]} {s[3]}"
            for s in runs[["library", "method", "dtype", "scaling"]].drop_duplicates().itertuples(index=False)
        )
        text += (
            f". Skipped {len(runs)} ({setups}, at n_timesteps {formatting.listing(sorted(set(runs['n_timesteps'])))}): "
            f"{reason}"
        )
    return text
