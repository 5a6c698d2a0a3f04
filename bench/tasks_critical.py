"""Two small learning tasks for bench/critical_batch.py, neither the noise task, both drawn afresh at every step so
no step repeats a sample: `spirals` (two interleaved spirals with 5% of labels flipped, a 2-64-64-2 tanh MLP,
cross-entropy: a classifier whose boundary winds) and `reach` (behaviour cloning: a 64-64 tanh MLP regresses the 2-D
action of a scripted reaching controller, clipped at its speed limit, from noisy observations of the arm and the
goal along the controller's own trajectories: a smooth regression with a noise floor).

Three ways to train them: `train_many` steps many copies of one task's MLP at once (stacked weights, one batched
matmul per layer: each copy its own lr, initial weights and samples) for the steps-to-target sweep; `main` is a
torchrun target that trains one MLP under DistributedDataParallel on gloo, as a fine-tune would, so the product's
gauge reads it; `exact_noise_scale` computes B_simple = tr(Sigma) / |G|^2 at given weights from per-sample gradients."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

EVAL_SAMPLES = 8192
EVAL_SEED = 99


@dataclass(frozen=True)
class Task:
    name: str
    inputs: int
    outputs: int
    classify: bool
    target: float
    """The loss on the eval set to reach (above each task's floor, which every batch reaches at its best lr)."""
    draw: Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean loss over the last-but-one dimension (samples), one figure per leading index (model)."""
        if self.classify:
            logp = out.log_softmax(-1)
            return -logp.gather(-1, y.expand(out.shape[:-1]).unsqueeze(-1)).squeeze(-1).mean(-1)
        return 0.5 * (out - y).square().sum(-1).mean(-1)


def draw_spirals(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two spirals of 1.5 turns, points jittered by 0.03, 5% of the labels flipped."""
    label = torch.randint(0, 2, (n,), generator=g)
    t = torch.rand(n, generator=g).sqrt()
    angle = 3 * math.pi * t + math.pi * label
    x = torch.stack([t * angle.cos(), t * angle.sin()], -1) * 2 + 0.03 * torch.randn(n, 2, generator=g)
    flipped = torch.where(torch.rand(n, generator=g) < 0.05, 1 - label, label)
    return x, flipped


REACH_LIMIT = 0.15
REACH_GAIN = 0.8


def draw_reach(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """States along the scripted controller's reaches (arm and goal in the unit square, 0 to 11 steps in), the
    observation noisy (0.05), the demonstrator's action its gain times the offset, clipped to its speed limit, with
    a little noise of its own (0.01), in units of that limit (as a policy's actions are normalized)."""
    arm, goal = torch.rand(n, 2, generator=g) * 2 - 1, torch.rand(n, 2, generator=g) * 2 - 1
    steps_in = torch.randint(0, 12, (n,), generator=g)
    for k in range(11):
        moving = (steps_in > k).unsqueeze(-1)
        arm = torch.where(moving, arm + controller(arm, goal), arm)
    observed = torch.cat([arm, goal], -1) + 0.05 * torch.randn(n, 4, generator=g)
    return observed, (controller(arm, goal) + 0.01 * torch.randn(n, 2, generator=g)) / REACH_LIMIT


def controller(arm: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
    step = REACH_GAIN * (goal - arm)
    norm = step.norm(dim=-1, keepdim=True).clamp_min(1e-9)
    return step * (REACH_LIMIT / norm).clamp(max=1.0)


TASKS = {
    "spirals": Task("spirals", 2, 2, True, 0.35, draw_spirals),
    "reach": Task("reach", 4, 2, False, 0.05, draw_reach),
}
HIDDEN = 64
DRAW_STEPS = 50


def make_model(task: Task, seed: int) -> torch.nn.Sequential:
    """The task's MLP with the initial weights of `seed` (torch's default init)."""
    torch.manual_seed(10_007 + seed)
    return torch.nn.Sequential(
        torch.nn.Linear(task.inputs, HIDDEN),
        torch.nn.Tanh(),
        torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.Tanh(),
        torch.nn.Linear(HIDDEN, task.outputs),
    )


def stacked(models: list[torch.nn.Sequential]) -> list[torch.Tensor]:
    """The models' Linear weights and biases stacked along a new first dimension, leaves that need gradients."""
    params = zip(*(list(m.parameters()) for m in models))
    return [torch.stack([p.detach() for p in group]).requires_grad_() for group in params]


def forward_many(params: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Every stacked MLP on its own samples (x: models x samples x inputs, or 1 x samples x inputs for all)."""
    h = x
    for i in range(0, len(params), 2):
        h = torch.baddbmm(params[i + 1].unsqueeze(1), h.expand(len(params[0]), -1, -1), params[i].transpose(1, 2))
        if i + 2 < len(params):
            h = h.tanh()
    return h


def state_of(task: Task, weights: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """One copy's weights (Sweep.reached) as make_model's state dict."""
    return dict(zip((n for n, _ in make_model(task, 0).named_parameters()), weights))


def eval_set(task: Task) -> tuple[torch.Tensor, torch.Tensor]:
    return task.draw(EVAL_SAMPLES, torch.Generator().manual_seed(EVAL_SEED))


def checkpoints(limit: int) -> list[int]:
    """The steps the eval loss is read at: every step to 20, then 4% apart."""
    found, step = list(range(1, 21)), 20.0
    while step < limit:
        step *= 1.04
        found.append(min(limit, round(step)))
    return sorted(set(found))


@dataclass
class Sweep:
    """Per copy: steps to the target (None: not within the limit, or diverged) and its weights when it got there."""

    steps: list[float | None]
    reached: dict[int, list[torch.Tensor]]


def train_many(task: Task, batch: int, lrs: list[float], seeds: list[int], limit: int, patience: float = 5.0) -> Sweep:
    """One copy per (lr, seed) pair at this batch, trained by plain SGD; the copies of a seed share their initial
    weights and samples (so their lrs are compared on the same draws). Steps to the task's target eval loss,
    interpolated between the two readings that straddle it. A copy leaves the stack once it reached the target or
    diverged; the rest stop at `limit` or at `patience` times the steps of the first lr whose median seed reached it
    (the best lr's: a slower copy is only needed up to there, for a bigger batch kept at a smaller batch's lr)."""
    pairs = [(lr, seed) for lr in lrs for seed in seeds]  # the samples of a step: one draw, cut per seed
    params = stacked([make_model(task, seed) for _, seed in pairs])
    active = list(range(len(pairs)))
    generator = torch.Generator().manual_seed(1_000_003 * seeds[0] + batch)
    x_eval, y_eval = eval_set(task)
    found: list[float | None] = [None] * len(pairs)
    reached: dict[int, list[torch.Tensor]] = {}
    before = [math.inf] * len(pairs)
    reads, last, per_draw, end = checkpoints(limit), 0, len(seeds) * batch, limit
    for step in range(1, limit + 1):
        if (step - 1) % DRAW_STEPS == 0:  # DRAW_STEPS steps' samples in one draw: fewer small tensor calls
            xs, ys = task.draw(DRAW_STEPS * per_draw, generator)
        at = slice(((step - 1) % DRAW_STEPS) * per_draw, ((step - 1) % DRAW_STEPS + 1) * per_draw)
        column = torch.tensor([seeds.index(pairs[i][1]) for i in active])
        x, y = xs[at].view(len(seeds), batch, -1)[column], ys[at].view(len(seeds), batch, *ys.shape[1:])[column]
        grads = torch.autograd.grad(task.loss(forward_many(params, x), y).sum(), params)
        rate = torch.tensor([pairs[i][0] for i in active])
        with torch.no_grad():
            for p, grad in zip(params, grads):
                p -= rate.view(-1, *([1] * (p.dim() - 1))) * grad
        if step != reads[last]:
            continue
        last += 1
        with torch.no_grad():
            now = task.loss(forward_many(params, x_eval.unsqueeze(0)), y_eval.unsqueeze(0)).tolist()
        keep = []
        for row, (i, value) in enumerate(zip(active, now)):
            if value <= task.target:
                previous = reads[last - 2] if last >= 2 else 0
                fell = before[i] - value
                share = (before[i] - task.target) / fell if math.isfinite(before[i]) and fell > 0 else 1.0
                found[i] = previous + share * (step - previous)
                reached[i] = [p[row].detach().clone() for p in params]
            elif math.isfinite(value) and value < 1e3:
                keep.append(row)
            before[i] = value
        active = [active[row] for row in keep]
        params = [p[keep].detach().requires_grad_() for p in params]
        medians = [
            sorted(f for f in found[k * len(seeds) : (k + 1) * len(seeds)] if f is not None) for k in range(len(lrs))
        ]
        firsts = [m[len(seeds) // 2] for m in medians if len(m) > len(seeds) // 2]
        end = min(limit, int(patience * min(firsts))) if firsts else limit
        if not active or step >= end:
            break
    return Sweep(found, reached)


def exact_noise_scale(task: Task, state: dict[str, torch.Tensor], samples: int = 40_000) -> float:
    """B_simple = tr(Sigma) / |G|^2 at these weights from per-sample gradients of `samples` fresh draws; |G|^2 less
    the tr(Sigma)/n its sample mean carries."""
    model = make_model(task, 0)
    model.load_state_dict(state)
    params = {k: v.detach() for k, v in model.named_parameters()}

    def one(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.func.functional_call(model, p, (x.unsqueeze(0),))
        return task.loss(out, y.unsqueeze(0)).squeeze()

    per_sample = torch.func.vmap(torch.func.grad(one), in_dims=(None, 0, 0))
    g = torch.Generator().manual_seed(4242)
    total, squares = None, 0.0
    for _ in range(samples // 5000):
        x, y = task.draw(5000, g)
        grads = per_sample(params, x, y)
        flat = torch.cat([v.reshape(5000, -1) for v in grads.values()], 1).double()
        total = flat.sum(0) if total is None else total + flat.sum(0)
        squares += float(flat.square().sum())
    assert total is not None
    n = 5000 * (samples // 5000)
    mean = total / n
    trace = (squares / n - float(mean.square().sum())) * n / (n - 1)
    return trace / (float(mean.square().sum()) - trace / n)


def main() -> int:
    """torchrun target: one MLP of the task under DDP (gloo), each rank its own samples, for --steps steps."""
    parser = argparse.ArgumentParser(description="train one task's MLP under DDP")
    parser.add_argument("--task", choices=sorted(TASKS), required=True)
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--batch-size", type=int, required=True, help="per process")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--init", help="a state dict to start from (default: the initial weights of seed 0)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank()
    task = TASKS[args.task]
    model = make_model(task, 0)
    if args.init:
        model.load_state_dict(torch.load(args.init, weights_only=True))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(7_919 * (rank + 1))
    for _ in range(args.steps):
        x, y = task.draw(args.batch_size, g)
        task.loss(ddp(x).unsqueeze(0), y.unsqueeze(0)).sum().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
