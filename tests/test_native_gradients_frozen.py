"""The native solver's trajectories and gradients, bit for bit as they were before its backward was optimised.

The numbers in tests/data/native_frozen.pt come from `python -m tests.native_frozen_cases`, run on the
solver before issue #16's changes. Bits depend on the CPU's vector unit and on torch's kernels, so
the comparison runs only where both match the machine that wrote the file.
"""
from __future__ import annotations

import pytest
import torch

from tests.native_frozen_cases import FROZEN_PATH, cases, run

FROZEN = torch.load(FROZEN_PATH)
SAME_KERNELS = (
    FROZEN["torch_version"] == str(torch.__version__) and FROZEN["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
)
pytestmark = pytest.mark.skipif(
    not SAME_KERNELS,
    reason=f"frozen on torch {FROZEN['torch_version']} with {FROZEN['cpu_capability']}; here torch {torch.__version__} "
    f"with {torch.backends.cpu.get_cpu_capability()}, whose kernels may round differently",
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
