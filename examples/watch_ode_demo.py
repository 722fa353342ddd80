"""torchdiffeq's ode_demo (examples/ode_demo.py there: a spiral dy/dt = (y³)A learned by an MLP from batches of
10-step pieces of one trajectory), with a watch added to its loop: every 50 iterations the step is measured in float16
under autocast against float64 on the current weights and that batch. The demo's own training is left as it is
(float32, dopri5).

    python examples/watch_ode_demo.py [--niters 400] [--out reports/watch-ode-demo]
    roundoff report reports/watch-ode-demo        # watch_report.md and figures/watch.png

With `--docs-figure PATH` the rendered figure is copied there too (docs/watch.md shows it).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torchdiffeq import odeint

import roundoff_analyzer as ra
from roundoff_analyzer.training.watch_report import write_watch_report

DATA_SIZE, BATCH_TIME, BATCH_SIZE = 1000, 10, 20
TRUE_Y0 = torch.tensor([[2.0, 0.0]])
TRUE_A = torch.tensor([[-0.1, 2.0], [-2.0, -0.1]])
T = torch.linspace(0.0, 25.0, DATA_SIZE)


class Lambda(nn.Module):
    def forward(self, t, y):
        return torch.mm(y**3, TRUE_A)


with torch.no_grad():
    TRUE_Y = odeint(Lambda(), TRUE_Y0, T, method="dopri5")


def get_batch():
    s = torch.from_numpy(np.random.choice(np.arange(DATA_SIZE - BATCH_TIME, dtype=np.int64), BATCH_SIZE, replace=False))
    batch_y0 = TRUE_Y[s]  # (M, D)
    batch_t = T[:BATCH_TIME]  # (T)
    batch_y = torch.stack([TRUE_Y[s + i] for i in range(BATCH_TIME)], dim=0)  # (T, M, D)
    return batch_y0, batch_t, batch_y


class ODEFunc(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 50), nn.Tanh(), nn.Linear(50, 2))
        for m in self.net.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, mean=0, std=0.1)
                nn.init.constant_(m.bias, val=0)

    def forward(self, t, y):
        return self.net(y**3)


def step(func, batch, odeint):
    """The demo's forward and loss, as a step: `odeint` is torchdiffeq's in the loop, the watch's when it measures."""
    batch_y0, batch_t, batch_y = batch
    pred_y = odeint(func, batch_y0, batch_t)
    return torch.mean(torch.abs(pred_y - batch_y))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--niters", type=int, default=400)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--out", default="reports/watch-ode-demo")
    parser.add_argument("--docs-figure", default=None)
    args = parser.parse_args()
    torch.manual_seed(0)
    np.random.seed(0)

    func = ODEFunc()
    optimizer = torch.optim.RMSprop(func.parameters(), lr=1e-3)
    watch = ra.watch(func, step, every=args.every, dtype="float16", out=args.out)  # added
    for itr in range(1, args.niters + 1):
        batch = get_batch()
        watch(itr, batch)  # added
        optimizer.zero_grad()
        loss = step(func, batch, odeint)
        loss.backward()
        optimizer.step()
        if itr % args.every == 0:
            print(f"Iter {itr:04d} | Total Loss {loss.item():.6f}", flush=True)

    written = write_watch_report(Path(args.out))
    print(f"report: {written}")
    if args.docs_figure:
        shutil.copyfile(Path(args.out) / "figures" / "watch.png", args.docs_figure)


if __name__ == "__main__":
    main()
