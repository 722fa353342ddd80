"""What a sweep's `manifest.json` holds, as the readers of a finished folder (report, check) rely on it. Every key is
optional (older versions wrote fewer) and keys it does not name pass through; a key of the wrong kind is refused in one
line by json_files.validated."""
from __future__ import annotations

from typing import Any, Optional

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ..core.json_files import read_json_model


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ManifestModel(_Open):
    name: Optional[str] = None
    description: Optional[str] = None
    options: dict[str, Any] = {}


class ManifestGrid(_Open):
    timesteps: list[int] = []
    methods: list[str] = []
    modes: list[str] = []
    library_dtype_scaling: list[list[str]] = []
    description: Optional[str] = None
    arithmetic: Optional[list[str] | str] = None
    rounding: Optional[list[str]] = None


class ManifestScaler(_Open):
    # Every version wrote all three; the report states them together.
    init_scale: float
    backoff_factor: float
    max_retries: int


class ManifestCheckpoint(_Open):
    name: Optional[str] = None
    path: Optional[str] = None
    sha256: Optional[str] = None
    iteration: Optional[int] = None


class SweepManifest(_Open):
    tool: Optional[str] = None
    created_at: Optional[str] = None
    finished_at: Optional[str] = None
    duration_s: Optional[float] = None
    n_configurations: Optional[int] = None
    repeats: Optional[int] = None
    timeout_s: Optional[float] = None
    seed: Optional[int] = None
    # Tables that may be absent (an older version) but not null: the readers look inside them.
    model: ManifestModel = ManifestModel()
    data: Optional[str] = None
    data_source: Optional[str] = None
    checkpoint: Optional[ManifestCheckpoint] = None
    checkpoints: list[ManifestCheckpoint] = []
    device: Optional[str] = None
    device_description: Optional[str] = None
    execution: dict[str, Any] = {}
    cpu_memory: Optional[bool] = None
    fp8_scaling: Optional[bool] = None
    scaler: ManifestScaler = ManifestScaler(init_scale=2.0**16, backoff_factor=0.5, max_retries=30)
    versions: dict[str, Optional[str]] = {}
    grid: ManifestGrid = ManifestGrid()
    fingerprint: dict[str, Any] = {}
    settings: dict[str, Any] = {}


def read_manifest(path: Path, advice: str) -> dict[str, Any]:
    """The manifest at `path` as a plain dict of the keys it holds, every one of the kind the readers expect."""
    return read_json_model(path, SweepManifest, "a sweep manifest", advice).model_dump(exclude_unset=True)


class TrainSetupRecord(_Open):
    label: str
    library: Optional[str] = None
    method: Optional[str] = None
    n_timesteps: Optional[int] = None
    dtype: Optional[str] = None
    scaling: Optional[str] = None
    mode: Optional[str] = None
    arithmetic: Optional[str] = None
    folder: Optional[str] = None


class TrainManifest(_Open):
    """A training's `train_manifest.json`, as resume and `training_report.md` read it."""

    kind: Optional[str] = None
    tool: Optional[str] = None
    version: Optional[str] = None
    created_at: Optional[str] = None
    updated_at: Optional[str] = None
    finished_at: Optional[str] = None
    model: Optional[str] = None
    options: dict[str, Any] = {}
    seed: Optional[int] = None
    data: Optional[str] = None
    data_source: Optional[str] = None
    iters: Optional[int] = None
    save_at: list[int] = []
    resume_every: Optional[int] = None
    lr: Optional[float] = None
    optimizer: Optional[str] = None
    val_batches: Optional[int] = None
    val_every: Optional[int] = None
    validation: Optional[str] = None
    device: Optional[str] = None
    threads: dict[str, Any] = {}
    scaler: Optional[ManifestScaler] = None
    setups: list[TrainSetupRecord] = []
    left_out: list[str] = []
    fingerprint: dict[str, Any] = {}


def read_train_manifest(path: Path, advice: str) -> dict[str, Any]:
    return read_json_model(path, TrainManifest, "a training manifest", advice).model_dump(exclude_unset=True)
