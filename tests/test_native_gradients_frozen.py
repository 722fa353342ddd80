"""The native solver's trajectories and gradients, bit for bit as they were before its backward was optimised.

The numbers in tests/data/native_frozen_<CPU capability>.pt come from `python -m tests.native_frozen_cases`,
run on the solver before issue #16's changes, on an AVX512 CPU and on an AVX2 one. Bits depend on the CPU's
vector unit and on torch's kernels, so the comparison runs only where a file of this machine's capability
exists and was written by this torch.
"""
from __future__ import annotations

import pytest
import torch

from tests.native_frozen_cases import FROZEN_FOLDER, cases, frozen_path, run

CAPABILITY = torch.backends.cpu.get_cpu_capability()
FROZEN = torch.load(frozen_path(CAPABILITY)) if frozen_path(CAPABILITY).is_file() else None
FROZEN_HERE = FROZEN is not None and FROZEN["torch_version"] == str(torch.__version__)
pytestmark = pytest.mark.skipif(
    not FROZEN_HERE,
    reason=f"no numbers frozen with torch {torch.__version__} on a {CAPABILITY} CPU in {FROZEN_FOLDER.name}/ "
    f"({', '.join(sorted(p.name for p in FROZEN_FOLDER.glob('native_frozen_*.pt')))}); other kernels may round differently",
)


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.detach().reshape(-1).contiguous().view(torch.uint8)


@pytest.mark.parametrize("case", cases(), ids=lambda case: case.key)
def test_trajectory_and_gradients_are_bit_for_bit_the_frozen_ones(case):
    frozen = FROZEN["cases"][case.key]
    now = run(case)
    assert sorted(now) == sorted(frozen)
    for name, want in frozen.items():
        got = now[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert torch.equal(_bits(got), _bits(want)), f"{name}: largest difference {float((got.double() - want.double()).abs().max())}"


def test_the_frozen_cases_cover_retries_and_overflow():
    # Without these, the test above would not exercise the scaler's back-off or a non-finite gradient.
    frozen = FROZEN["cases"]
    assert any(int(c.get("scale_retries", 0)) > 0 for c in frozen.values())
    assert any(not torch.isfinite(g).all() for c in frozen.values() for name, g in c.items() if name.startswith("grad_"))
