import warnings

import rampde
import torch

from ...core.errors import LibraryUnsupported
from ..methods import Method
from .base import LibraryAdapter
from .handed import odeint_of

# rampde reads torch.is_autocast_enabled() (CUDA's) and autocasts with device_type="cuda" only.
CPU_AUTOCAST_REASON = (
    "rampde switches to mixed precision only under CUDA autocast: on {device} it keeps its states and its backward in "
    "float32, so its numbers would not be those of a {dtype} run"
)


class RampdeLibrary:
    name = "rampde"
    import_line = "from roundoff_analyzer.axes.libraries.rampde_lib import odeint  # rampde, as swept"
    # rampde differentiates func.parameters() only: the step's code hands it the model, as the sweep does.
    odeint_takes_model = True
    supports_adjoint_scaling = False

    def unsupported_method_reason(self, method: Method) -> str | None:
        if method.name not in ("euler", "rk4", "rk4_classical"):
            return f"rampde has fixed-grid euler and rk4 (classical) only, not '{method.name}'"
        return None

    def solve(self, func, y0, t, method, scaler, report):
        device_type = y0.device.type
        if device_type != "cuda" and torch.is_autocast_enabled(device_type):
            dtype = str(torch.get_autocast_dtype(device_type)).removeprefix("torch.")
            raise LibraryUnsupported(CPU_AUTOCAST_REASON.format(device=device_type, dtype=dtype))
        with warnings.catch_warnings():
            # Without CUDA, its autocast(device_type="cuda") regions warn on every step and do nothing.
            warnings.filterwarnings("ignore", message="CUDA is not available")
            return rampde.odeint(func, y0, t, method=method.name.removesuffix("_classical"), loss_scaler=False)


LIBRARY: LibraryAdapter = RampdeLibrary()
# torchdiffeq's signature, solving as the runs did: what the answer's code imports (`import_line`).
odeint = odeint_of(LIBRARY)
