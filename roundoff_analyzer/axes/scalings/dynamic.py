from ...solvers import DynamicAdjointScaler
from .base import SCALINGS, BackwardResult, plain_backward


class DynamicScaling:
    name = "dynamic"
    description = "the native solver's dynamic adjoint scaling, step by step inside its backward"

    def skip_reason(self, library):
        if not library.supports_adjoint_scaling:
            return f"{library.name} has no adjoint of its own to scale: dynamic adjoint scaling needs the native solver's backward"
        return None

    def adjoint_scaler(self, settings):
        return DynamicAdjointScaler(max_retries=settings.max_retries)

    def backward(self, loss, leaves, adjoint_scaler, settings, hint=None):
        grads = plain_backward(loss, leaves)
        return BackwardResult(grads, final_scale=adjoint_scaler.scale, retries=adjoint_scaler.retries)


SCALINGS.register(DynamicScaling())
