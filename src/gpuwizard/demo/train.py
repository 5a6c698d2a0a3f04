"""The demo training loop; run under torchrun: `torchrun --nproc-per-node=2 -m gpuwizard.demo.train ...`."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

from gpuwizard.demo.dataset import CAMERA, ensure_dataset, load_arrays
from gpuwizard.demo.heldout import eval_loss, held_out_frames
from gpuwizard.demo.model import CHUNK, DemoPolicy
from gpuwizard.demo.noise import NoiseRegression, closed_form
from gpuwizard.demo.progress import ProgressBar

DEFAULT_LR = 1e-3
SEED_STRIDE = 1_000_003
"""Apart per --seed, so the ranks of two seeds never share a sampling stream."""
ACTIVATION_MB_PER_SAMPLE = 8.0
"""Memory the demo holds per sample of its per-process batch, so peak memory grows with the batch like a model's:
well above its step's own tensors (about 0.25 MB a sample) and its peak's jitter from run to run (0.2 MB), so the
probe's memory line puts a simulated device's limit between the right two batches."""
MB = 2**20
M_MMAP_THRESHOLD = -3
"""glibc's mallopt parameter (malloc.h): blocks from this size up are mapped on their own and unmapped when freed."""


def parse_rank_step(text: str) -> tuple[int, int]:
    rank, step = text.split(":")
    return int(rank), int(step)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="gpuwizard demo trainer")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--lr", type=float, default=DEFAULT_LR)
    parser.add_argument("--warmup-steps", type=int, default=0)
    parser.add_argument("--output-dir", default="outputs/train/demo")
    parser.add_argument("--dataset-root", required=True)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument(
        "--eval-split", type=float, default=0.0, help="the fraction of episodes held out (LeRobot main's form)"
    )
    parser.add_argument("--eval-every", type=int, default=0, help="steps between held-out losses (0: none)")
    parser.add_argument(
        "--label-noise",
        type=float,
        default=0.0,
        help="noise of this deviation, drawn once per frame, in every action label: a long run on few episodes then "
        "learns the noise of its own episodes, and its held-out loss rises (the demo made to overfit)",
    )
    parser.add_argument("--save-every", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0, help="the initial weights and each rank's sampling stream")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from <output-dir>/checkpoints/last: weights, optimizer, "
        "schedule, step and every rank's sampler state",
    )
    parser.add_argument(
        "--step-time", type=float, default=0.0, help="extra seconds per step (simulates a bigger model)"
    )
    parser.add_argument("--checkpoint-time", type=float, default=0.0, help="extra seconds per checkpoint save")
    parser.add_argument("--inject-hang", type=parse_rank_step, default=None, metavar="RANK:STEP")
    parser.add_argument("--inject-crash", type=parse_rank_step, default=None, metavar="RANK:STEP")
    parser.add_argument(
        "--inject-nan", type=int, default=None, metavar="STEP", help="from this step on the loss is NaN"
    )
    parser.add_argument(
        "--device-memory-mb",
        type=float,
        default=None,
        help="the device holds this much: a run whose peak memory (resident on CPU, reserved on CUDA) passes it "
        "fails with the allocator's own out-of-memory error",
    )
    parser.add_argument(
        "--task",
        choices=["policy", "noise"],
        default="policy",
        help="policy: the demo policy on its dataset; noise: linear regression whose noise scale is known",
    )
    parser.add_argument("--noise-dim", type=int, default=4)
    parser.add_argument("--noise-sigma", type=float, default=1.0)
    parser.add_argument("--noise-offset", type=float, default=0.25, help="|w - w*| where the noise task starts")
    parser.add_argument(
        "--noise-hold", action="store_true", help="put the weights back after every step (a fixed point)"
    )
    parser.add_argument(
        "--ignore-lr-flag",
        action="store_true",
        help="train with the built-in lr, as a trainer that silently drops --lr would",
    )
    return parser.parse_args(argv)


def log(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def action_chunks(actions: np.ndarray, episode_index: np.ndarray) -> np.ndarray:
    """For every frame, the next CHUNK actions of its episode (the last one repeated at the end)."""
    n = len(actions)
    idx = np.arange(n)[:, None] + np.arange(CHUNK)[None, :]
    idx = np.minimum(idx, n - 1)
    ends = np.searchsorted(episode_index, episode_index, side="right") - 1
    idx = np.minimum(idx, ends[:, None])
    chunks: np.ndarray = actions[idx]
    return chunks


def _injected_hang(rank: int, step: int, out: Path) -> None:
    """This rank stops entering collectives; the others block in all-reduce.

    The start time goes to a side file (never the log) so benchmarks can measure detection latency.
    """
    out.mkdir(parents=True, exist_ok=True)
    (out / "injected_hang.json").write_text(json.dumps({"rank": rank, "step": step, "t": time.time()}))
    while True:
        time.sleep(0.5)


def checkpoint_dir(out: Path, step: int) -> Path:
    return out / "checkpoints" / f"{step:06d}"


def save_sampler_state(generator: torch.Generator, rank: int, step: int, out: Path) -> None:
    """Each rank keeps its own sampler position, so a resumed run draws what the uninterrupted one would."""
    target = checkpoint_dir(out, step)
    target.mkdir(parents=True, exist_ok=True)
    torch.save(generator.get_state(), target / f"sampler-rank{rank}.pt.tmp")
    os.replace(target / f"sampler-rank{rank}.pt.tmp", target / f"sampler-rank{rank}.pt")


def save_checkpoint(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    step: int,
    out: Path,
    extra_seconds: float,
) -> None:
    started = time.monotonic()
    target = checkpoint_dir(out, step)
    log(f"Saving checkpoint at step {step} -> {target}")
    target.mkdir(parents=True, exist_ok=True)
    tmp = target / "model.pt.tmp"
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
    }
    torch.save(state, tmp)
    if extra_seconds:
        time.sleep(extra_seconds)
    os.replace(tmp, target / "model.pt")
    last = out / "checkpoints" / "last"
    if last.is_symlink() or last.exists():
        last.unlink()
    last.symlink_to(target.name)
    log(f"Checkpoint saved in {time.monotonic() - started:.2f} s")


def resume_state(
    out: Path,
    rank: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    generator: torch.Generator,
) -> int:
    """Load checkpoints/last into the model, optimizer, schedule and this rank's sampler; returns its step."""
    last = (out / "checkpoints" / "last").resolve()
    state = torch.load(last / "model.pt", map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    sampler = last / f"sampler-rank{rank}.pt"
    if sampler.exists():
        generator.set_state(torch.load(sampler, weights_only=True))
    else:  # another world size: a fresh but distinct stream per rank
        generator.manual_seed(rank * 100_003 + state["step"])
    if rank == 0:
        log(f"Resuming from step {state['step']} ({last})")
    return int(state["step"])


def policy_data(root: Path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray]:
    """The dataset's images, states, each frame's action chunk and episode."""
    data = load_arrays(root)
    images = torch.from_numpy(data["image"]).permute(0, 3, 1, 2).contiguous()
    targets = torch.from_numpy(action_chunks(data["action"], data["episode_index"]))
    return images, torch.from_numpy(data["state"]), targets, data["episode_index"]


def hold_activations(batch_size: int, device: torch.device) -> torch.Tensor:
    """Memory for the batch's activations (ACTIVATION_MB_PER_SAMPLE each), touched so it is resident."""
    return torch.ones(int(batch_size * ACTIVATION_MB_PER_SAMPLE * MB), dtype=torch.uint8, device=device)


class SimulatedDevice:
    """A device that holds `limit_mb` (--device-memory-mb): the process's peak memory, the figure the probe's gauge
    reads (peak resident memory on CPU, the caching allocator's peak reservation on CUDA), may not pass it. On CUDA
    the caching allocator is capped there and refuses by itself; on CPU the peak is checked after each step and a
    run past it asks the allocator for more than any machine has, so either way the error is the allocator's own
    out-of-memory kind (DefaultCPUAllocator's, torch.OutOfMemoryError), as a batch too large for a device gets."""

    def __init__(self, limit_mb: float, device: torch.device):
        self.limit_mb, self.device = limit_mb, device
        if device.type == "cuda":
            total = torch.cuda.get_device_properties(device).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, limit_mb * MB / total), device)
        else:
            steady_heap()

    def peak_mb(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_reserved(self.device) / MB
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux, as the gauge reads it

    def check(self) -> None:
        if self.peak_mb() > self.limit_mb:
            torch.ones(1 << 50, dtype=torch.uint8, device=self.device)  # a petabyte: refused by any allocator


def steady_heap() -> None:
    """Large blocks mapped and unmapped whole: glibc otherwise keeps freed ones in its heap by a threshold that slides
    with what was freed, and the peak of the same run then varies by megabytes (within 0.2 MB with this, measured
    over repeated runs at batches 16 to 200), so a simulated device's limit and the fit of the probe see one figure.
    Where the C library has no mallopt (not glibc) the heap is left as it is."""
    try:
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 64 * 1024)
    except (OSError, AttributeError):
        pass


@record
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", 1))))
    distributed = "MASTER_ADDR" in os.environ
    if distributed:
        dist.init_process_group(
            "nccl" if args.device == "cuda" else "gloo", device_id=device if args.device == "cuda" else None
        )

    noise = NoiseRegression(args.noise_dim, args.noise_offset) if args.task == "noise" else None
    root = Path(args.dataset_root)
    if local_rank == 0 and noise is None:
        ensure_dataset(root, args.episodes)
    if distributed:
        dist.barrier()
    frames = 0
    if noise is None:
        images, states, targets, episode_index = policy_data(root)
        if args.label_noise:
            noisy = torch.Generator().manual_seed(7)
            targets = targets + args.label_noise * torch.randn(targets.shape, generator=noisy)
        train_frames, eval_frames = (torch.from_numpy(f) for f in held_out_frames(episode_index, args.eval_split))
        frames = len(train_frames)

    torch.manual_seed(1000 + args.seed)
    model: torch.nn.Module = noise.to(device) if noise is not None else DemoPolicy(dof=states.shape[1]).to(device)
    lr = DEFAULT_LR if args.ignore_lr_flag else args.lr
    optimizer = (
        torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
        if noise is None
        else torch.optim.SGD(model.parameters(), lr=lr)  # the noise scale's theory is for plain SGD
    )
    warmup = args.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0)
    ddp = (
        DistributedDataParallel(model, device_ids=[local_rank] if args.device == "cuda" else None)
        if distributed
        else None
    )
    forward = ddp if ddp is not None else model
    generator = torch.Generator().manual_seed(rank + SEED_STRIDE * args.seed)
    effective = args.batch_size * world * args.grad_accum
    out = Path(args.output_dir)
    start = resume_state(out, rank, model, optimizer, scheduler, generator) if args.resume else 0
    params = sum(p.numel() for p in model.parameters())
    if rank == 0 and noise is not None:
        log(
            f"noise task: d={args.noise_dim} sigma={args.noise_sigma:g} |w - w*|={args.noise_offset:g}: "
            f"B_simple = {closed_form(args.noise_dim, args.noise_sigma, args.noise_offset):.4g} in closed form"
        )
    elif rank == 0:
        log(f"dataset {root}: {len(states)} frames, camera {CAMERA}")
        if len(eval_frames):
            held, total = len(np.unique(episode_index[eval_frames])), len(np.unique(episode_index))
            log(f"Train/eval split: {total - held} train, {held} eval episodes (eval_split={args.eval_split})")
        log(
            f"policy: {params} parameters on {device} "
            f"({'DDP ' + dist.get_backend() if distributed else 'single process'})"
        )
        log(f"Effective batch size: {args.batch_size} x {world} workers x {args.grad_accum} grad accum = {effective}")
    simulated = SimulatedDevice(args.device_memory_mb, device) if args.device_memory_mb is not None else None
    activations = hold_activations(args.batch_size, device)
    if simulated:
        simulated.check()
    bar = ProgressBar(args.steps, initial=start) if rank == 0 else None

    window_start, window_steps, loss_sum = time.monotonic(), 0, torch.zeros(1, device=device)
    for step in range(start + 1, args.steps + 1):
        if args.inject_crash and args.inject_crash == (rank, step):
            raise RuntimeError(f"injected crash at step {step} on rank {rank}")
        if args.inject_hang and args.inject_hang == (rank, step):
            _injected_hang(rank, step, Path(args.output_dir))
        for micro in range(args.grad_accum):
            if noise is not None:
                x, y = noise.batch(args.batch_size, args.noise_sigma, generator)
                loss = 0.5 * (forward(x.to(device)) - y.to(device)).square().mean() / args.grad_accum
            else:
                idx = train_frames[torch.randint(0, frames, (args.batch_size,), generator=generator)]
                image = images[idx].to(device, non_blocking=True).float().div_(255.0)
                state = states[idx].to(device)
                target = targets[idx].to(device)
                loss = F.mse_loss(forward(image, state), target) / args.grad_accum
            if args.inject_nan is not None and step >= args.inject_nan:
                loss = loss * float("nan")  # a diverged run: every later step logs nan
            if ddp is not None and micro < args.grad_accum - 1:
                with ddp.no_sync():
                    loss.backward()
            else:
                loss.backward()
            loss_sum += loss.detach()
        optimizer.step()
        if simulated:  # the peak of the step, as the gauge read it in the optimizer's post-step hook
            simulated.check()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if noise is not None and args.noise_hold:
            noise.hold()
        if args.step_time:
            time.sleep(args.step_time)
        window_steps += 1
        if bar:
            bar.update(step)
        if step % args.log_every == 0 or step == args.steps:
            if distributed:
                dist.all_reduce(loss_sum)
            mean_loss = loss_sum.item() / window_steps / world
            elapsed = time.monotonic() - window_start
            if rank == 0:
                sys.stderr.write("\n")
                log(
                    f"step {step}/{args.steps} loss={mean_loss:.4f} lr={optimizer.param_groups[0]['lr']:.3e} "
                    f"samples/s={effective * window_steps / elapsed:.1f}"
                )
            window_start, window_steps = time.monotonic(), 0
            loss_sum.zero_()
        if noise is None and len(eval_frames) and args.eval_every and step % args.eval_every == 0:
            held_loss = eval_loss(model, eval_frames, (images, states, targets), device, rank, world)
            if rank == 0:
                log(f"step {step}: eval_loss={held_loss:.4f}")
        if (args.save_every and step % args.save_every == 0) or step == args.steps:
            save_sampler_state(generator, rank, step, out)
            if distributed:
                dist.barrier()  # every rank's sampler file is in place before `last` moves
            if rank == 0:
                save_checkpoint(model, optimizer, scheduler, step, out, args.checkpoint_time)
            if distributed:
                dist.barrier()
    del activations
    if bar:
        bar.close()
    if rank == 0:
        log(f"Training finished: {args.steps} steps, checkpoint in {out / 'checkpoints' / 'last'}")
    if distributed:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
