"""Time per iteration, measured interleaved once every setup has trained.

The setups train one after another, so their own iteration times (the log's `iter_time_s`) are measured minutes apart:
a change in the machine's load in between (other work starting or ending) moves their ratio as much as the setups'
own costs do. Here each setup runs TIMING_ROUNDS more iterations from its final state, one setup after another in every
round (each round starting one setup further on), so that a change of load falls on every setup alike; a setup's time
is the median of its rounds, and its ratio to the first setup's the median of the per-round ratios, with their range.
A round before these warms each setup up (first-call costs) and is not counted. Nothing of these iterations is kept:
each starts from the setup's saved state, on the last iteration's batch.
"""

from __future__ import annotations

import copy

from .loop import iterate, restore
from .request_checks import TrainPlan

TIMING_ROUNDS = 7


def interleaved_times(plan: TrainPlan, initial: dict, states: dict[str, dict]) -> dict[str, list[float]]:
    """Seconds per iteration of each setup with a final state in `states` (label -> resume state), one per round."""
    setups = [setup for setup in plan.setups if setup.setup_label in states]
    batch = plan.stream.train_batch(plan.config.iters)
    times: dict[str, list[float]] = {setup.setup_label: [] for setup in setups}
    for round_index in range(TIMING_ROUNDS + 1):
        for k in range(len(setups)):
            setup = setups[(round_index + k) % len(setups)]
            # A copy: the optimizer takes the state's tensors as they are and updates them in place.
            restored = restore(plan, setup, initial, copy.deepcopy(states[setup.setup_label]))
            seconds = iterate(restored, batch, plan.config.clip_grad_norm, plan.device).seconds
            if round_index:
                times[setup.setup_label].append(seconds)
    return times
