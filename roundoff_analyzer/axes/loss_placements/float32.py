from .base import LOSS_PLACEMENTS, LossPlacement


class Float32(LossPlacement):
    name = "float32"
    description = (
        "the loss formed after the solve, outside autocast, from the solver's output cast to float32 (for a model "
        "given as a training step: autocast around its solves only)"
    )
    where = "outside autocast, in float32"
    step_in_context = False


LOSS_PLACEMENTS.register(Float32())
