from .drop_in import TableauWarning, odeint
from .native import increment
from .step_magnitudes import SolveReport, StepRecord
from .scaler import DynamicAdjointScaler

__all__ = ["odeint", "increment", "DynamicAdjointScaler", "SolveReport", "StepRecord", "TableauWarning"]
