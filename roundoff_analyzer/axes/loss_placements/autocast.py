from .base import LOSS_PLACEMENTS, LossPlacement


class InsideAutocast(LossPlacement):
    name = "autocast"
    description = (
        "the loss formed inside the run's autocast block, from the solver's output as returned, as a training script "
        "writes it (in pure mode: from the low-precision output; for a model given as a training step: the whole step "
        "under autocast)"
    )
    where = "inside autocast"
    # Autocast decides each op's dtype: a matrix product in the loss runs in the low dtype whatever the solver
    # returned, and a low-precision trajectory is not cast up first.
    step_in_context = True


LOSS_PLACEMENTS.register(InsideAutocast())
