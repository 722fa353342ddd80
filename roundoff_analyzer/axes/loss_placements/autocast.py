from .base import LOSS_PLACEMENTS


class InsideAutocast:
    name = "autocast"
    description = (
        "the loss formed inside the run's autocast block, from the solver's output as returned, as a training script "
        "writes it (in pure mode: from the low-precision output)"
    )
    where = "inside autocast"

    def form(self, loss, trajectory, context, loss_dtype):
        # Autocast decides each op's dtype here: a matrix product in the loss runs in the low dtype whatever the
        # solver returned, and a low-precision trajectory is not cast up first.
        with context():
            return loss(trajectory)


LOSS_PLACEMENTS.register(InsideAutocast())
