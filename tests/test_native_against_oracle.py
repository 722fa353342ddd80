"""The optimised native solver against its plain oracle (tests/native_oracle.py), bit for bit, in this process.

Both run here, on this CPU and this torch build, so no number frozen elsewhere is involved: the
optimisations (one autocast region for the whole backward, the fused unscale-and-check, freed graphs,
foreach sums) may change no bit of a trajectory, loss, gradient, final scale or retry count.
"""

from __future__ import annotations

import pytest
import torch

from tests.native_cases import cases, run

pytestmark = pytest.mark.unit


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.detach().reshape(-1).contiguous().view(torch.uint8)


@pytest.mark.parametrize("case", cases(), ids=lambda case: case.key)
def test_trajectory_and_gradients_equal_the_oracle_bit_for_bit(case):
    want = run(case, oracle=True)
    got = run(case)
    assert sorted(got) == sorted(want)
    for name, expected in want.items():
        value = got[name]
        assert value.dtype == expected.dtype and value.shape == expected.shape, name
        difference = (
            float((value.double() - expected.double()).abs().nan_to_num(nan=float("inf")).max())
            if value.numel()
            else 0.0
        )
        assert torch.equal(_bits(value), _bits(expected)), f"{name}: largest difference {difference}"


def test_the_cases_cover_retries_and_overflow():
    # Without these, the comparison above would not exercise the scaler's back-off or a non-finite gradient.
    results = [run(case) for case in cases() if case.scaler or case.model == "otflow_overflowing"]
    assert any(int(r.get("scale_retries", 0)) > 0 for r in results)
    assert any(not torch.isfinite(g).all() for r in results for name, g in r.items() if name.startswith("grad_"))
