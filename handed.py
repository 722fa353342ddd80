import torch
import roundoff_analyzer
from roundoff_analyzer.solvers import odeint  # in place of torchdiffeq's odeint
torch.set_num_threads(1)  # as this sweep measured (torch's default there: 2)
# your factory, imported from examples/damped_oscillator.py as this sweep imported it (run
# this from the folder the sweep ran in), built as the sweep built it (torch seeded with its
# seed): y0, then batches 1 to 2 of its data where it draws them
problem = roundoff_analyzer.model(
    "examples/damped_oscillator.py:damped_oscillator", seed=0, frequency=2.0, damping=0.1,
    hidden=8, batch=8,
)
func, loss_fn, batches = problem.func, problem.loss, [problem.y0, *problem.batches(2)]
optimizer = torch.optim.Adam(func.parameters())  # yours: the sweep chose none
max_norm = float("inf")  # yours, if you clip (inf clips nothing)
for y0 in batches:
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        trajectory = odeint(func, y0, torch.linspace(0, 1, 5), method="euler")
    loss = loss_fn(trajectory.float())  # formed in float32, outside autocast, as measured
    loss.backward()
    torch.nn.utils.clip_grad_norm_(func.parameters(), max_norm)  # if you clip
    optimizer.step()
    print(f"loss {loss.item():.6g}")
