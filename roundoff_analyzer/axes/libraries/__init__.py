# ruff: noqa: I001  (the imports register values; their order is the order the values are listed and swept)
from .base import LIBRARIES, MISSING_LIBRARIES, SolverLibrary, UnavailableLibrary
from . import native, native_low, torchdiffeq_adjoint, torchdiffeq_lib  # noqa: F401  (registrations)
from .optional import register_optional
from .plugins import ENTRY_POINT_GROUP, FORMS, load_entry_points, resolve_library

register_optional(
    "torchode",
    "torchode_lib",
    ("torchode",),
    'pip install -e ".[torchode]" -c constraints.txt in the roundoff-analyzer checkout',
    "fixed steps (its Euler; the other fixed-grid tableaux, rk4 the classical one, through its generic explicit "
    "Runge-Kutta), dopri5 and tsit5 adaptive with its integral controller; the whole batch is one problem",
)
# torchdyn's declared requirements (torchvision, pytorch-lightning, ...) would replace the installed torch with another
# build; its solvers import only these.
register_optional(
    "torchdyn",
    "torchdyn_lib",
    ("torchdyn", "torchcde", "torchsde", "attr"),
    "pip install torchcde torchsde attrs && pip install --no-deps torchdyn",
    "odeint on the fixed grid (euler, midpoint, rk4 = rk4_classical), autograd through every stage",
)
register_optional(
    "rampde",
    "rampde_lib",
    ("rampde",),
    "pip install git+https://github.com/EmoryMLIP/rampde",
    'the mixed-precision fixed-grid solver of "Mixed Precision Training of Neural ODEs" (euler, rk4 = '
    "rk4_classical), without its internal loss scaler; "
    "mixed precision under CUDA autocast only",
)
load_entry_points()

__all__ = [
    "LIBRARIES",
    "MISSING_LIBRARIES",
    "ENTRY_POINT_GROUP",
    "FORMS",
    "SolverLibrary",
    "UnavailableLibrary",
    "resolve_library",
]
