"""roundoff-analyzer: what float16 and bfloat16 do to neural ODE solutions and gradients."""

__version__ = "0.1.0"
