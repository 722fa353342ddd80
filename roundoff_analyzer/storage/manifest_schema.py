"""What a sweep's `manifest.json` holds, as the readers of a finished folder (report, check) rely on it. Every key is
optional (older versions wrote fewer) and keys it does not name pass through; a key of the wrong kind is refused in one
line by json_files.validated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..core.json_files import read_json_model


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ManifestModel(_Open):
    name: str | None = None
    description: str | None = None
    options: dict[str, Any] = {}


class ManifestGrid(_Open):
    timesteps: list[int] = []
    methods: list[str] = []
    modes: list[str] = []
    library_dtype_scaling: list[list[str]] = []
    description: str | None = None
    arithmetic: list[str] | str | None = None
    rounding: list[str] | None = None


class ManifestScaler(_Open):
    # Every version wrote all three; the report states them together.
    init_scale: float
    backoff_factor: float
    max_retries: int


class ManifestCheckpoint(_Open):
    name: str | None = None
    path: str | None = None
    sha256: str | None = None
    iteration: int | None = None


class ManifestSettings(_Open):
    """What a row depends on beyond the fingerprint (planning/manifest.py's row_settings)."""

    timeout_s: float | None = None
    cpu_memory: bool | None = None
    # The file each spec of the user's code names, spec -> sha256 (None: no file to read).
    user_code: dict[str, str | None] = {}
    # Every other file of the user's code its loading brought in, path -> sha256; absent where no spec is the user's
    # code, and in a folder from before it was recorded.
    user_files: dict[str, str] | None = None
    per_module: bool | None = None


class SweepManifest(_Open):
    tool: str | None = None
    created_at: str | None = None
    finished_at: str | None = None
    duration_s: float | None = None
    n_configurations: int | None = None
    repeats: int | None = None
    timeout_s: float | None = None
    seed: int | None = None
    seeds: list[int] = []  # several where the sweep ran each seed's initialisation (the seed axis); else its seed
    # Tables that may be absent (an older version) but not null: the readers look inside them.
    model: ManifestModel = ManifestModel()
    data: str | None = None
    data_source: str | None = None
    checkpoint: ManifestCheckpoint | None = None
    checkpoints: list[ManifestCheckpoint] = []
    device: str | None = None
    device_description: str | None = None
    device_details: dict[str, Any] = {}
    execution: dict[str, Any] = {}
    cpu_memory: bool | None = None
    fp8_scaling: bool | None = None
    scaler: ManifestScaler = ManifestScaler(init_scale=2.0**16, backoff_factor=0.5, max_retries=30)
    versions: dict[str, str | None] = {}
    grid: ManifestGrid = ManifestGrid()
    fingerprint: dict[str, Any] = {}
    settings: ManifestSettings = ManifestSettings()


def read_manifest(path: Path, advice: str) -> dict[str, Any]:
    """The manifest at `path` as a plain dict of the keys it holds, every one of the kind the readers expect."""
    return read_json_model(path, SweepManifest, "a sweep manifest", advice).model_dump(exclude_unset=True)


class TrainSetupRecord(_Open):
    label: str
    library: str | None = None
    method: str | None = None
    n_timesteps: int | None = None
    dtype: str | None = None
    scaling: str | None = None
    mode: str | None = None
    arithmetic: str | None = None
    folder: str | None = None


class TrainManifest(_Open):
    """A training's `train_manifest.json`, as resume and `training_report.md` read it."""

    kind: str | None = None
    tool: str | None = None
    version: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    finished_at: str | None = None
    model: str | None = None
    options: dict[str, Any] = {}
    seed: int | None = None
    data: str | None = None
    data_source: str | None = None
    iters: int | None = None
    save_at: list[int] = []
    resume_every: int | None = None
    lr: float | None = None
    optimizer: str | None = None
    val_batches: int | None = None
    val_every: int | None = None
    validation: str | None = None
    device: str | None = None
    threads: dict[str, Any] = {}
    scaler: ManifestScaler | None = None
    setups: list[TrainSetupRecord] = []
    left_out: list[str] = []
    fingerprint: dict[str, Any] = {}


def read_train_manifest(path: Path, advice: str) -> dict[str, Any]:
    return read_json_model(path, TrainManifest, "a training manifest", advice).model_dump(exclude_unset=True)
