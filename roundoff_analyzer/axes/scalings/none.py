from .base import SCALINGS, BackwardResult, plain_backward


class NoScaling:
    name = "none"
    description = "plain backward, no scaling"

    def skip_reason(self, library):
        return None

    def adjoint_scaler(self, settings):
        return None

    def backward(self, loss, leaves, adjoint_scaler, settings, hint=None):
        return BackwardResult(plain_backward(loss, leaves))


SCALINGS.register(NoScaling())
