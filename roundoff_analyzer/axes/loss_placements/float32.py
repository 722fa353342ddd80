from .base import LOSS_PLACEMENTS


class Float32:
    name = "float32"
    description = "the loss formed after the solve, outside autocast, from the solver's output cast to float32"
    where = "outside autocast, in float32"

    def form(self, loss, trajectory, context, loss_dtype):
        return loss(trajectory.to(loss_dtype))


LOSS_PLACEMENTS.register(Float32())
