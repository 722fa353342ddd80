"""The CPU allocator's peak inside a block, from torch.profiler's memory events.

torch has no peak-memory counter for the CPU (only `torch.cuda.max_memory_allocated`), but with
`profile_memory=True` its profiler reports every allocation and free of the CPU allocator, in
order. The running sum of those sizes is what the block had allocated at each moment; its maximum
is the block's peak above what was allocated when it began. The profiler records every op as
well, so a block measured this way runs slower (about 2x on small ops): time it separately.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from torch._C._autograd import DeviceType
from torch.profiler import ProfilerActivity, profile


@dataclass
class PeakMemory:
    bytes: int | None = None


@contextmanager
def cpu_peak_memory() -> Iterator[PeakMemory]:
    """`.bytes`: the most the CPU allocator held at once inside the block, beyond what it held before."""
    result = PeakMemory()
    # kineto, the profiler's backend, writes a line to stderr at every start and stop (`USDT:... profiler_start`),
    # at its severity 5; a level of 6, read when the profiler is first used, keeps the user's terminal clean. A level
    # set by the user is kept.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False, with_stack=False
    ) as profiler:
        yield result
    sizes = [
        (event.start_ns(), event.nbytes())
        for event in profiler.profiler.kineto_results.events()
        if event.name() == "[memory]" and event.device_type() == DeviceType.CPU
    ]
    running = itertools.accumulate(size for _, size in sorted(sizes))
    result.bytes = max(0, max(running, default=0))
