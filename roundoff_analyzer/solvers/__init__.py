from .native import increment, odeint
from .report import SolveReport, StepRecord
from .scaler import DynamicAdjointScaler

__all__ = ["odeint", "increment", "DynamicAdjointScaler", "SolveReport", "StepRecord"]
