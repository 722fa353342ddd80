"""rampde (the library of "Mixed Precision Training of Neural ODEs") made to mix precision under CPU autocast, as an
oracle for the native solver.

rampde reads CUDA's autocast state and opens `autocast(device_type="cuda")` regions, so on a CPU it
runs everything in float32. `load(folder)` writes a copy of the installed package into `folder` with
those device names turned to "cpu" and imports it under another name; its arithmetic is otherwise
rampde's own, line for line. None when rampde is not installed (MIT; not on PyPI: install a wheel of its public
release).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

NAME = "rampde_on_cpu"


def load(folder: Path) -> ModuleType | None:
    spec = importlib.util.find_spec("rampde")
    if spec is None or not spec.submodule_search_locations:
        return None
    if NAME in sys.modules:
        return sys.modules[NAME]
    source = Path(next(iter(spec.submodule_search_locations)))
    target = folder / NAME
    target.mkdir(parents=True, exist_ok=True)
    for path in source.glob("*.py"):
        text = path.read_text()
        text = text.replace("device_type='cuda'", "device_type='cpu'").replace(
            'device_type="cuda"', 'device_type="cpu"'
        )
        text = text.replace("torch.get_autocast_dtype('cuda')", "torch.get_autocast_dtype('cpu')")
        text = text.replace("torch.is_autocast_enabled()", "torch.is_autocast_enabled('cpu')")
        (target / path.name).write_text(text)
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(NAME)
    finally:
        sys.path.remove(str(folder))
