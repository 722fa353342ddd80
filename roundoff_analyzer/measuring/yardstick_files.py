"""The yardsticks' pieces in the results folder (`yardsticks/`), computed once per sweep by whichever process gets
there first.

The fine reference and the gradient noise cost as much as a sizeable part of the grid (about a quarter of
the default otflow sweep), and every process that measures configurations needs them. Saving each piece
lets the N processes of `--workers N` compute different pieces at the same time and read the others', and
lets a resumed sweep read them instead of solving again. A piece is computed under an advisory lock on
its own lock file, which the kernel drops when its process dies: a process that finds the lock taken
waits for the piece, and computes it itself if the holder died without saving it.

A file is read with `torch.load(weights_only=True)` (tensors and plain containers, no code), and only when
its key matches: the sweep's fingerprint, its n_timesteps and its noise batches.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from ..core.safe_files import atomic_write
from .discretisation import COARSENINGS
from .gradient_noise import NOISE_TIMESTEPS

YARDSTICKS = "yardsticks"


def yardstick_key(
    fingerprint_digest: str | None,
    timesteps: list[int],
    noise_batches: int,
    checkpoint: str = "",
    noise_batch_size: int | None = None,
    seed: int | None = None,
) -> str:
    key: dict = {"sweep": fingerprint_digest, "timesteps": sorted(timesteps), "noise_batches": noise_batches}
    # Pieces saved by a version that drew the noise on another grid, or solved the fine reference at other densities,
    # are not this version's: a resumed sweep recomputes them rather than mixing two grids in one estimate.
    key["noise_timesteps"] = NOISE_TIMESTEPS
    key["fine_coarsenings"] = list(COARSENINGS)
    if noise_batch_size is not None:
        key["noise_batch_size"] = noise_batch_size
    if checkpoint:  # one of several checkpoints: the problem is that checkpoint's
        key["checkpoint"] = checkpoint
    if seed is not None:  # one of several seeds: the problem is that seed's
        key["seed"] = seed
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()


class YardstickFiles:
    def __init__(self, folder: Path, key: str, device: torch.device) -> None:
        self.folder, self.key, self.device = Path(folder), key, device

    def obtain(self, piece: str, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The saved piece; or, under its lock, computed, saved and returned."""
        found = self.load(piece)
        if found is not None:
            return found
        self.folder.mkdir(parents=True, exist_ok=True)  # a checkpoint's folder under yardsticks/ with it
        with self._locked(piece):
            found = self.load(piece)  # saved by the process that held the lock while this one waited
            if found is None:
                found = compute()
                self._save(piece, found)
        return found

    def load(self, piece: str) -> dict[str, Any] | None:
        """The piece's content, or None when it is absent, unreadable or another sweep's."""
        path = self._path(piece)
        if not path.is_file():
            return None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                content = torch.load(path, map_location=self.device, weights_only=True)
        except Exception:  # noqa: BLE001 - a truncated or foreign file is computed again
            return None
        if not isinstance(content, dict) or content.get("key") != self.key:
            return None
        return content

    def _save(self, piece: str, content: dict[str, Any]) -> None:
        # A full disk costs this sweep's other processes a solve of their own, never a result.
        with contextlib.suppress(OSError):
            atomic_write(self._path(piece), lambda file: torch.save({**content, "key": self.key}, file))

    def _path(self, piece: str) -> Path:
        return self.folder / f"{piece}.pt"

    @contextmanager
    def _locked(self, piece: str) -> Iterator[None]:
        try:
            descriptor = os.open(
                self.folder / f".{piece}.lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644
            )
        except OSError:
            yield  # no lock file here: this process computes the piece on its own
            return
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX)  # blocks while another process computes the piece
            except OSError as exc:
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise
            yield
        finally:
            os.close(descriptor)  # closing drops the lock
