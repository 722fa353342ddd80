"""The batches of a training: held-out batches for the validation loss, then one fresh batch per iteration.

Batch k comes from the problem's `sample_batch(k)`, a function of the seed and k only, so every setup, and a
resumed run, sees the same stream. Batches 1 … V are held out for the
validation loss and never trained on; iteration i (1-based) trains on batch V + i.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..axes.models import ModelProblem, NoMoreBatches, TrajectoryProblem
from ..core.errors import InputError, one_line

NO_SAMPLER = (
    "offers no batch sampler, and training draws a fresh batch every iteration; a factory of your own "
    "offers one as a fourth return value, sample_batch(k), returning batch k >= 1 shaped like y0"
)


@dataclass(frozen=True)
class BatchStream:
    sample: Callable[[int], Any]
    val_batches: int

    def validation_indices(self) -> range:
        return range(1, self.val_batches + 1)

    def train_index(self, iteration: int) -> int:
        return self.val_batches + iteration

    def train_batch(self, iteration: int) -> Any:
        return self.sample(self.train_index(iteration))

    def validation_set(self) -> list[Any]:
        return [self.sample(k) for k in self.validation_indices()]


def batch_stream(problem: ModelProblem, model_name: str, val_batches: int, iters: int) -> BatchStream:
    """The stream, after checking that the sampler exists and reaches the last iteration's batch (a data file may
    run out of rows): bad input is found before anything is written."""
    if not problem.has_more_batches:
        raise InputError(f"model {model_name} {NO_SAMPLER}")
    stream = BatchStream(problem.sample_batch, val_batches)
    try:
        last = stream.train_batch(iters)  # a data file with too few rows raises InputError
    except (InputError, NoMoreBatches) as exc:
        raise InputError(
            f"the last iteration trains on batch {stream.train_index(iters)} ({val_batches} held out, then one per "
            f"iteration), which the data cannot give: {exc}"
        ) from None
    except Exception as exc:  # noqa: BLE001 - a user's sampler failed
        raise InputError(
            f"model {model_name}: sample_batch({stream.train_index(iters)}) raised {one_line(exc)}"
        ) from None
    if isinstance(problem, TrajectoryProblem) and last.shape != problem.y0.shape:
        raise InputError(
            f"model {model_name}: sample_batch({stream.train_index(iters)}) returned shape "
            f"{tuple(last.shape)}; expected y0's {tuple(problem.y0.shape)}"
        )
    return stream
