"""What an author of a new axis value implements, and where it registers: one import for every plug-in.

Each axis of a sweep or a training is a registry of small implementations behind one protocol. A new value is
an object that follows the axis's protocol, registered under its `name` with the axis's `register_*` function;
from then on the sweep, `roundoff list` and the error messages in this process know it. The built-in values are
registered the same way (`roundoff_analyzer/axes/methods/heun.py` is two lines).

Each axis (its sweep key in parentheses), what a value of it implements, and the function that registers it:

- model (`model`): `ModelSpec`: `options_type` (a `ModelOptions`), `build(options, device, data)` returning a
  `Problem` (a training step: `model`, `step(model, batch, odeint)`, `sample_batch(k)`) or a `TrajectoryProblem`
  (`func`, `y0`, the `loss` of the whole trajectory on [0, 1]); registered with `register_model`.
- data (`data`): `DataSource`: `load(...)` returning a `Batch`; registered with `register_data_source`.
- solver library (`library`): `SolverLibrary`: `unsupported_method_reason(method)`,
  `solve(func, y0, t, method, scaler, report)`, and `import_line`, the line the answer's code imports an `odeint` with
  torchdiffeq's signature with (`odeint_of(library)` makes one that solves through `solve`; without the line, the
  answer hands no code); registered with `register_library`.
- method (`method`): an `ExplicitRK` tableau (fixed grid) or an `AdaptiveRK` pair; registered with
  `register_method`.
- dtype (`dtype`): a `DtypeSpec`; registered with `register_dtype`.
- loss scaling (`scaling`): `Scaling`: `skip_reason`, `adjoint_scaler`, `backward` returning a
  `BackwardResult`; registered with `register_scaling`.
- mode (`mode`): `Mode`: `prepare(copies, dtype)` returning a `PreparedRun`; registered with `register_mode`.
- arithmetic (`arithmetic`): `Arithmetic`: `prepare(mode, copies, dtype, request)`; registered with
  `register_arithmetic`.
- rounding (`rounding`): `Rounding`; registered with `register_rounding`.
- loss placement (`loss_in`): `LossPlacement`: `step_in_context` (whether the whole step runs inside the run's
  autocast or emulation, or only its solves, their output cast to the loss's dtype); registered with
  `register_loss_placement`.
- weight update (`update`, training): `UpdateRule`: `apply(w, delta, compensation, fmt, generator)`;
  registered with `register_update`.
- optimizer (`optimizer`, training): an `OptimizerSpec` around `build(params, lr)`; registered with
  `register_optimizer`.
- executor (`executor`): `Executor`: `target_device(config)`, `settings(config)`, `run(execution)` returning
  an `ExecutionReport`; registered with `register_executor`.

A value registered here exists in the process that registered it: use it from Python (`roundoff_analyzer.sweep`
with `executor="local"`). The command line and worker processes find a user's code by where it lives instead:
a model factory or a solver library as `package.module:name` or `path/to/file.py:name`, an optimizer factory
the same way, and an installed solver library by an entry point in the group `LIBRARY_ENTRY_POINT_GROUP`
(docs: "Models, data and your own code").

Registering a name twice raises ValueError. Failures a library or a scaling names: `StepBudgetExhausted` (an
adaptive solve ran out of `max_steps`), `LibraryUnsupported` (the configuration cannot run as asked),
`ScalerExhausted` (a scaler halved its scale as often as it may).
"""

from __future__ import annotations

from .axes.arithmetics import ARITHMETICS, Arithmetic, ArithmeticRequest
from .axes.data import DATA_SOURCES, Batch, DataOptions, DataSource
from .axes.dtypes import DTYPES, DtypeSpec
from .axes.libraries import ENTRY_POINT_GROUP as LIBRARY_ENTRY_POINT_GROUP
from .axes.libraries import LIBRARIES, SolverLibrary
from .axes.libraries.handed import odeint_of
from .axes.loss_placements import LOSS_PLACEMENTS, LossPlacement
from .axes.methods import METHODS, AdaptiveRK, ExplicitRK, Method
from .axes.models import MODELS, ModelOptions, ModelSpec, NoMoreBatches, Problem, TrajectoryProblem
from .axes.modes import MODES, Mode, PreparedRun, ProblemCopies
from .axes.names import REGISTERED_EXECUTORS
from .axes.roundings import ROUNDINGS, Rounding
from .axes.scalings import SCALINGS, BackwardResult, ScalerSettings, Scaling
from .core.errors import LibraryUnsupported, ScalerExhausted, StepBudgetExhausted
from .execution.executors import EXECUTORS, Execution, ExecutionReport, Executor
from .solvers import DynamicAdjointScaler, SolveReport
from .training.optimizers import OPTIMIZERS, OptimizerSpec
from .training.updates import UPDATES, UpdateRule

__all__ = [
    "LIBRARY_ENTRY_POINT_GROUP",
    "AdaptiveRK",
    "Arithmetic",
    "ArithmeticRequest",
    "BackwardResult",
    "Batch",
    "DataOptions",
    "DataSource",
    "DtypeSpec",
    "DynamicAdjointScaler",
    "Execution",
    "ExecutionReport",
    "Executor",
    "ExplicitRK",
    "LibraryUnsupported",
    "LossPlacement",
    "Method",
    "Mode",
    "ModelOptions",
    "ModelSpec",
    "NoMoreBatches",
    "OptimizerSpec",
    "PreparedRun",
    "Problem",
    "ProblemCopies",
    "TrajectoryProblem",
    "Rounding",
    "ScalerExhausted",
    "ScalerSettings",
    "Scaling",
    "SolveReport",
    "SolverLibrary",
    "StepBudgetExhausted",
    "UpdateRule",
    "odeint_of",
    "register_arithmetic",
    "register_data_source",
    "register_dtype",
    "register_executor",
    "register_library",
    "register_loss_placement",
    "register_method",
    "register_mode",
    "register_model",
    "register_optimizer",
    "register_rounding",
    "register_scaling",
    "register_update",
]

# Each axis's registration: `register_x(value)` registers `value` under `value.name` and returns it. These are the
# registries' own `register` methods, the ones the built-in values call.
register_arithmetic = ARITHMETICS.register
register_data_source = DATA_SOURCES.register
register_dtype = DTYPES.register
register_library = LIBRARIES.register
register_loss_placement = LOSS_PLACEMENTS.register
register_method = METHODS.register
register_mode = MODES.register
register_model = MODELS.register
register_optimizer = OPTIMIZERS.register
register_rounding = ROUNDINGS.register
register_scaling = SCALINGS.register
register_update = UPDATES.register


def register_executor(executor: Executor) -> Executor:
    """Register `executor` under its `name`, where sweeps and the config's check find it; returns it.

    Args:
        executor: Follows the `Executor` protocol: `name`, `description`, `runs_here`, `unavailable_reason()`,
            `target_device(config)`, `settings(config)` and `run(execution)`, which writes one shard per finished
            configuration through `execution.store`.

    Returns:
        `executor` itself.

    Raises:
        ValueError: An executor of that name is registered already.
    """
    EXECUTORS.register(executor)
    REGISTERED_EXECUTORS.append(executor.name)
    return executor
