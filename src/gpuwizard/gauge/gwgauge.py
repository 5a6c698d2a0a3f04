"""The gauge inside a training process (stdlib and torch only): one JSON line per optimizer step in the file
GPUWIZARD_GAUGE_FILE names: wall time, peak memory, and under DDP the squared norm of this rank's own gradient before
the all-reduce and of the averaged one after it, with the batch sizes they stand for (the estimator,
gpuwizard.analysis.probe.noise_scale, turns them into the noise scale). It waits for torch's own modules to be imported,
then adds one communication hook to each DistributedDataParallel module that does exactly what DDP does without one,
and reads the bucket on the way; it never changes what the trainer computes. Where it cannot measure, it says why in
one line and the run trains unchanged."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import resource
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

FILE_VAR = "GPUWIZARD_GAUGE_FILE"
RANK_BATCH_VAR = "GPUWIZARD_GAUGE_RANK_BATCH"
"""Samples behind one rank's gradient at an optimizer step: per-rank batch x accumulation, from the plan."""
GLOBAL_BATCH_VAR = "GPUWIZARD_GAUGE_GLOBAL_BATCH"
"""Samples behind the averaged gradient: the effective batch, from the plan."""
ACCUM_VAR = "GPUWIZARD_GAUGE_ACCUM"
"""Micro-batches per optimizer step: one process reads each one's share of the gradient as the small batch."""
MB = 2**20


def env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


class Gauge:
    """This process's measurements, written at each optimizer step."""

    def __init__(self, path: str):
        self.path, self.fd = path, -1
        self.steps, self.last = 0, time.monotonic()
        self.local: list[Any] = []
        """Squared norms (0-dim tensors) of this rank's buckets before the all-reduce, in the latest backward."""
        self.averaged: list[Any] = []
        self.fresh = True
        """The next bucket starts a new backward (the one before reached its last bucket)."""
        self.why: str | None = None
        self.told = False
        self.reduced = False
        """A DDP module of several ranks is hooked: its all-reduce gives the two batch sizes."""
        self.micro: MicroBatches | None = None
        self.rounds = 0
        """All-reduce rounds in this step: more than one where the trainer reduces every micro-batch (its forward
        ran outside DDP's no_sync), so a later round's bucket holds the earlier rounds' average too."""
        self.per_micro: PerMicro | None = None

    def write(self, record: dict[str, Any]) -> None:
        """One line per write(2) on an O_APPEND file, so the ranks' lines never interleave."""
        if self.fd < 0:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(self.fd, (json.dumps(record) + "\n").encode())

    def bucket_read(self, squared: Any, last: bool) -> None:
        if self.fresh:
            self.local, self.averaged = [], []
            self.rounds += 1
        self.local.append(squared)
        self.fresh = last

    def on_step(self, optimizer: Any, args: object, kwargs: object) -> None:
        """torch's global optimizer post-step hook."""
        try:
            self.record_step(optimizer)
        except Exception as exc:  # a measurement that fails must not fail the step
            self.why = self.why or f"the gauge failed: {exc!r}"

    def record_step(self, optimizer: Any) -> None:
        import torch

        now = time.monotonic()
        self.steps += 1
        rank = env_int("RANK") or 0
        local = averaged = None
        small, big, accum = env_int(RANK_BATCH_VAR), env_int(GLOBAL_BATCH_VAR), env_int(ACCUM_VAR) or 1
        if self.per_micro is not None:
            local, averaged = self.per_micro.norms()
        elif self.rounds > 1:  # from the next step on, each round's own share is kept (this step's is lost)
            self.per_micro = PerMicro()
        elif self.local and len(self.local) == len(self.averaged):
            local = float(torch.stack(self.local).sum().item())
            averaged = float(torch.stack(self.averaged).sum().item())
        elif self.micro is not None:
            if (norms := self.micro.norms()) is not None:
                local, averaged = norms
            small, big = (small // accum if small else None), small
        elif accum >= 2 and not self.reduced and self.why is None:  # read from the next step on
            params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
            self.micro = MicroBatches(accum, params)
        self.local, self.averaged, self.fresh, self.rounds = [], [], True, 0
        if not self.told and (self.why or (local is None and self.micro is None and self.per_micro is None)):
            self.told = True
            why = self.why or (
                "no DistributedDataParallel module of several ranks took this step's gradient, and no accumulation "
                "(one process, or a trainer that averages gradients itself): the noise scale needs two batch sizes"
            )
            self.write({"kind": "unmeasured", "rank": rank, "what": "gradient norms", "why": why})
        self.write(
            {
                "kind": "step",
                "rank": rank,
                "step": self.steps,
                "t": time.time(),
                "dt_s": round(now - self.last, 6),  # since the step before (the first: since the gauge started)
                **memory(torch),
                "local_sq": local,
                "avg_sq": averaged,
                "rank_batch": small,
                "global_batch": big,
            }
        )
        self.last = now


class PerMicro:
    """A trainer that all-reduces every micro-batch under DDP: each bucket's own share of a round is its buffer less
    the previous round's average, summed over the rounds (two gradient copies of memory)."""

    def __init__(self) -> None:
        self.local: dict[tuple[int, int], Any] = {}
        self.average: dict[tuple[int, int], Any] = {}

    def before(self, key: tuple[int, int], buffer: Any) -> None:
        previous = self.average.get(key)
        share = buffer.detach().clone() if previous is None else buffer.detach() - previous
        self.local[key] = share if key not in self.local else self.local[key] + share

    def after(self, key: tuple[int, int], reduced: Any) -> None:
        self.average[key] = reduced.detach().clone()

    def norms(self) -> tuple[float | None, float | None]:
        """This step's squared norms of the rank's own gradient and of the averaged one; then afresh."""
        local, average, self.local, self.average = self.local, self.average, {}, {}
        if not local or local.keys() != average.keys():
            return None, None
        own = sum(squared(t) for t in local.values())
        return float(own.item()), float(sum(squared(t) for t in average.values()).item())


class MicroBatches:
    """One process with accumulation (no all-reduce to read): each micro-batch's share of the gradient, read as it
    accumulates into .grad, stands for the small batch, the step's whole gradient for the big one."""

    def __init__(self, accum: int, params: list[Any]):
        self.accum, self.params = accum, params
        self.previous: dict[int, Any] = {}
        """Each parameter's .grad after the micro-batch before (a copy: one more gradient's memory)."""
        self.count: dict[int, int] = {}
        self.shares: list[Any] = []
        """Per micro-batch: the squared norm of its share, summed over the parameters."""
        for param in params:
            param.register_post_accumulate_grad_hook(self.read)

    def read(self, param: Any) -> None:
        key, grad = id(param), param.grad.detach()
        k = self.count.get(key, 0)
        self.count[key] = k + 1
        before = self.previous.get(key)
        share = squared(grad if before is None else grad - before)
        if k < len(self.shares):
            self.shares[k] = self.shares[k] + share
        else:
            self.shares.append(share)
        self.previous[key] = grad.clone()

    def norms(self) -> tuple[float, float] | None:
        """The mean squared norm of a micro-batch's mean gradient (accum x its share) and the step's; then afresh."""
        shares, self.shares, self.previous, self.count = self.shares, [], {}, {}
        if len(shares) != self.accum:
            return None
        whole = sum(squared(p.grad) for p in self.params if p.grad is not None)
        return float(sum(shares).item()) * self.accum, float(whole.item())


def memory(torch: Any) -> dict[str, float]:
    """The allocator's own peaks on CUDA (never reset: the trainer may read them too), resident memory on CPU."""
    if torch.cuda.is_initialized():
        return {
            "max_allocated_mb": round(torch.cuda.max_memory_allocated() / MB, 1),
            "max_reserved_mb": round(torch.cuda.max_memory_reserved() / MB, 1),
        }
    found = {"max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    try:
        with open("/proc/self/statm") as f:
            found["rss_mb"] = round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB, 1)
    except (OSError, ValueError, IndexError):
        pass
    return found


def squared(tensor: Any) -> Any:
    import torch

    with torch.no_grad():
        return torch.linalg.vector_norm(tensor.detach(), dtype=torch.float64).square()


def gauge_hook(gauge: Gauge, ddp: Any) -> Callable[[Any, Any], Any]:
    """A communication hook that reads the bucket, then reduces it as DDP would: without a hook of the trainer's,
    DDP scales each gradient by 1/world on its way into the bucket and sums (reducer.cpp, mark_variable_ready_dense);
    with one (ddp._gw_inner), that hook does the reduction."""
    import torch
    import torch.distributed as dist

    def reduced_for(key: tuple[int, int]) -> Callable[[Any], Any]:
        def reduced(fut: Any) -> Any:
            value = fut.value()
            tensor = value[0] if isinstance(value, list | tuple) else value
            gauge.averaged.append(squared(tensor))
            if gauge.per_micro is not None:
                gauge.per_micro.after(key, tensor)
            return tensor

        return reduced

    def gauge_comm_hook(state: Any, bucket: Any) -> Any:
        buffer, key = bucket.buffer(), (id(ddp), bucket.index())
        if gauge.per_micro is not None:
            gauge.per_micro.before(key, buffer)
        gauge.bucket_read(squared(buffer), bucket.is_last())
        inner = getattr(ddp, "_gw_inner", None)
        if inner is not None:
            return inner[1](inner[0], bucket).then(reduced_for(key))
        buffer.mul_(1.0 / dist.get_world_size(state))
        return dist.all_reduce(buffer, group=state, async_op=True).get_future().then(reduced_for(key))

    # DDP checks a hook's annotations at run time (_check_comm_hook): the real types, not this file's strings
    gauge_comm_hook.__annotations__ = {"bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}
    return gauge_comm_hook


def patch_ddp(gauge: Gauge, module: ModuleType) -> None:
    """Hook each DistributedDataParallel module at its first forward (after the trainer set it up), called as
    `ddp(batch)` or as `ddp.forward(batch)` (LeRobot 0.6.1's update_policy: no module hooks run then); a hook the
    trainer registers itself runs inside the gauge's, whenever it registers it."""
    import torch.distributed as dist

    ddp_class = module.DistributedDataParallel
    original_init, original_register = ddp_class.__init__, ddp_class.register_comm_hook
    original_forward = ddp_class.forward
    original_builtin = ddp_class._register_builtin_comm_hook

    def attach(ddp: Any) -> None:
        if dist.get_world_size(ddp.process_group) == 1:  # nothing to average: micro-batches, where accumulated
            if (inner := getattr(ddp, "_gw_inner", None)) is not None:
                original_register(ddp, *inner)
            return
        if getattr(ddp, "_gw_builtin", False) or ddp._comm_hooks:
            gauge.why = "DDP already has a communication hook (a built-in one, or its mixed precision's): not read"
            return
        gauge.reduced = True
        try:
            original_register(ddp, ddp.process_group, gauge_hook(gauge, ddp))
        except Exception as exc:  # a DDP this gauge does not know: it reduces as it would have
            gauge.why = f"the gauge's communication hook was refused: {exc!r}"
            if (inner := getattr(ddp, "_gw_inner", None)) is not None:
                original_register(ddp, *inner)
            return

    def __init__(self: Any, *args: object, **kwargs: object) -> None:
        original_init(self, *args, **kwargs)
        self._gw_attached = False

    def forward(self: Any, *args: object, **kwargs: object) -> Any:
        if self.__dict__.get("_gw_attached") is False:
            self._gw_attached = True
            attach(self)
        return original_forward(self, *args, **kwargs)

    def register_comm_hook(self: Any, state: object, hook: Callable[..., object]) -> None:
        if "_gw_attached" not in self.__dict__:  # inside DDP's own __init__ (mixed precision)
            original_register(self, state, hook)
            return
        self._gw_inner = (state, hook)

    def _register_builtin_comm_hook(self: Any, comm_hook_type: object) -> None:
        self._gw_builtin = True
        original_builtin(self, comm_hook_type)

    ddp_class.__init__ = __init__
    ddp_class.forward = forward
    ddp_class.register_comm_hook = register_comm_hook
    ddp_class._register_builtin_comm_hook = _register_builtin_comm_hook


def patch_fsdp(gauge: Gauge, module: ModuleType) -> None:
    fsdp_class = module.FullyShardedDataParallel
    original_init = fsdp_class.__init__

    def __init__(self: Any, *args: object, **kwargs: object) -> None:
        original_init(self, *args, **kwargs)
        gauge.why = "FSDP reduce-scatters gradient shards: no rank holds its whole local gradient to read"

    fsdp_class.__init__ = __init__


def on_optim(gauge: Gauge, module: ModuleType) -> None:
    module.register_optimizer_step_post_hook(gauge.on_step)


class AfterLoad(importlib.abc.Loader):
    """A module's own loader, then an action on the loaded module."""

    def __init__(self, loader: Any, action: Callable[[ModuleType], None]):
        self.loader, self.action = loader, action

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self.loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        try:
            self.action(module)
        except Exception as exc:  # a torch this gauge does not know: train unmeasured
            sys.stderr.write(f"[gpuwizard gauge] not hooked into {module.__name__}: {exc!r}\n")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class Watch(importlib.abc.MetaPathFinder):
    """Acts on torch's modules once they are imported, so the gauge itself imports nothing heavy at start-up."""

    def __init__(self, actions: dict[str, Callable[[ModuleType], None]]):
        self.actions = actions

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name not in self.actions:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: importlib.machinery.ModuleSpec | None = find(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = AfterLoad(spec.loader, self.actions.pop(name))
                return spec
        return None


def install() -> None:
    """Start the gauge in this process (sitecustomize calls it when GPUWIZARD_GAUGE_FILE is set)."""
    gauge = Gauge(os.environ[FILE_VAR])
    actions: dict[str, Callable[[ModuleType], None]] = {
        "torch.nn.parallel.distributed": lambda m: patch_ddp(gauge, m),
        "torch.distributed.fsdp.fully_sharded_data_parallel": lambda m: patch_fsdp(gauge, m),
        "torch.optim.optimizer": lambda m: on_optim(gauge, m),
    }
    for name in [n for n in actions if n in sys.modules]:
        actions.pop(name)(sys.modules[name])
    sys.meta_path.insert(0, Watch(actions))
