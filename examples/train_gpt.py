"""A small character-level GPT trained with DistributedDataParallel, supervised by trainguard.

    python examples/train_gpt.py --steps 200                       # one process
    torchrun --nproc-per-node 2 examples/train_gpt.py --steps 200  # two ranks (gloo on CPU)
    trainguard run -- python examples/train_gpt.py --steps 200     # under the supervisor

nanoGPT-shaped (token + position embeddings, pre-LN blocks of causal self-attention and MLP, no
dropout). Deterministic: for a given seed and world size the loss curve is bitwise the same run
after run, and a run that is killed and resumed from its last checkpoint continues the curve
exactly, because

1. the model is initialised right after ``torch.manual_seed(seed)``;
2. the batch of (step, rank) comes from a generator seeded with (seed, step, rank) only, so it
   does not depend on what ran before;
3. the checkpoint holds model, AdamW state and the next step; every rank loads it (or, after
   a failure under the supervisor, its own memory snapshot of the same state);
4. ``torch.use_deterministic_algorithms(True)`` and one intra-op thread (unless OMP_NUM_THREADS
   says otherwise) keep the arithmetic order fixed.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

import trainguard.train as tg

DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "corpus.txt"


# ---- model ---------------------------------------------------------------------------------


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int) -> None:
        super().__init__()
        if n_embd % n_head:
            raise SystemExit(f"--n-embd {n_embd} must be divisible by --n-head {n_head}")
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, block_size, block_size), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, n_layer: int, n_head: int, n_embd: int, block_size: int):
        super().__init__()
        self.block_size = block_size
        self.tok = nn.Embedding(vocab, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, block_size) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab, bias=False)
        self.head.weight = self.tok.weight  # weight tying, as in GPT-2
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = idx.size(1)
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


# ---- data ----------------------------------------------------------------------------------


def load_corpus(path: Path) -> tuple[torch.Tensor, list[str]]:
    text = path.read_text(encoding="utf-8")
    chars = sorted(set(text))
    index = {ch: i for i, ch in enumerate(chars)}
    return torch.tensor([index[ch] for ch in text], dtype=torch.long), chars


def get_batch(
    data: torch.Tensor, seed: int, step: int, rank: int, batch_size: int, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of (step, rank): a pure function of its arguments, so a resumed run draws the
    same batches as an uninterrupted one."""
    gen = torch.Generator().manual_seed(((seed * 1_000_003 + step) * 10_007 + rank) % 2**63)
    starts = torch.randint(len(data) - block_size - 1, (batch_size,), generator=gen)
    x = torch.stack([data[i : i + block_size] for i in starts.tolist()])
    y = torch.stack([data[i + 1 : i + 1 + block_size] for i in starts.tolist()])
    return x, y


# ---- training ------------------------------------------------------------------------------


def rank_ordered_mean(tensor: torch.Tensor) -> torch.Tensor:
    """The mean of ``tensor`` over all ranks, summed in rank order.

    A ring all-reduce over more than two ranks adds each element in an order that depends on
    where it falls in the buffer, and DDP lays its gradient buckets out differently on the first
    step after a (re)start than later on: the last bits would differ between a resumed and an
    uninterrupted run. Gathering and summing in rank order gives the same bits every time.
    """
    world = dist.get_world_size()
    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor.contiguous())
    total = parts[0].clone()
    for part in parts[1:]:
        total += part
    return total / world


def deterministic_allreduce_hook(state, bucket):  # type: ignore[no-untyped-def]
    """DDP communication hook: average each gradient bucket with :func:`rank_ordered_mean`.

    (No annotations: DDP checks them at runtime and this module's are strings.)"""
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(rank_ordered_mean(bucket.buffer()))
    return fut


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200, help="total training steps")
    p.add_argument("--ckpt-dir", default="checkpoints", help="checkpoint directory")
    p.add_argument("--ckpt-every", type=int, default=20, help="save every N steps (rank 0)")
    p.add_argument("--keep-last", type=int, default=3, help="checkpoints to keep")
    p.add_argument("--allow-fresh-start", action="store_true",
                   default=os.environ.get("TRAINGUARD_ALLOW_FRESH_START") == "1",
                   help="start from step 0 when --ckpt-dir holds checkpoints none of which can "
                        "be read (they are kept); default: refuse "
                        "(or TRAINGUARD_ALLOW_FRESH_START=1)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate")
    p.add_argument("--log-every", type=int, default=10, help="print the loss every N steps")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="training text (UTF-8)")
    p.add_argument("--loss-log", type=Path, help="rank 0 appends 'step loss' lines here")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()
    for name in ("steps", "ckpt_every", "keep_last", "log_every", "n_layer", "n_head", "n_embd",
                 "block_size", "batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main() -> int:
    args = parse_args()
    tg.init()
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")

    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    if use_cuda:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
        torch.cuda.set_device(device)
    torch.use_deterministic_algorithms(True)

    distributed = world > 1
    with tg.phase("dist_init"):
        if distributed:
            dist.init_process_group("nccl" if use_cuda else "gloo")

    data, chars = load_corpus(args.data)
    torch.manual_seed(args.seed)
    model = GPT(len(chars), args.n_layer, args.n_head, args.n_embd, args.block_size).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    if rank == 0:
        n_params = sum(p.numel() for p in model.parameters())
        print(f"model: {n_params / 1e6:.2f}M parameters, vocab {len(chars)}, "
              f"world size {world}, device {device}", flush=True)

    ckpts = tg.Checkpoints(args.ckpt_dir, keep_last=args.keep_last)
    with tg.phase("ckpt_load"):
        state, start_step = tg.load_torch(ckpts, map_location=device,
                                          allow_fresh_start=args.allow_fresh_start)
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start_step = int(state["step"])
            if rank == 0:
                print(f"resumed from step {start_step}", flush=True)
    ddp: nn.Module = model
    if distributed:
        ddp = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
        ddp.register_comm_hook(None, deterministic_allreduce_hook)

    loss_log = args.loss_log.open("a", encoding="utf-8") if args.loss_log and rank == 0 else None
    loss_value = math.nan
    started, done = time.perf_counter(), 0
    for step in range(start_step, args.steps):
        with tg.span("data"):
            x, y = get_batch(data, args.seed, step, rank, args.batch_size, args.block_size)
        with tg.span("forward"):
            loss = ddp(x.to(device), y.to(device))
        with tg.span("backward"):  # the gradient all-gathers (comm hook) run in here
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        with tg.span("optimizer"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()

        reported = loss.detach()
        if distributed:  # every rank reports the same global loss
            reported = rank_ordered_mean(reported)
        loss_value = reported.item()
        tg.step(step, loss=loss_value)
        done += 1

        if rank == 0:
            if loss_log is not None:
                loss_log.write(f"{step} {loss_value!r}\n")
                loss_log.flush()
            if step % args.log_every == 0 or step + 1 == args.steps:
                print(f"step {step} loss {loss_value:.4f}", flush=True)
        # Every rank: a snapshot in host memory when due (the SDK picks the interval; off
        # unless the supervisor gave a snapshot directory). The callable runs only then.
        ckpts.snapshot(step + 1, lambda next_step=step + 1: {
            "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "step": next_step, "vocab": chars})
        if (step + 1) % args.ckpt_every == 0 or step + 1 == args.steps:
            if rank == 0:
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                         "step": step + 1, "vocab": chars}
                # Returns once the tensors are snapshotted; written in the background.
                ckpts.save_state(step + 1, state)
            if distributed:
                dist.barrier()  # nobody runs ahead of a checkpoint that might fail

    elapsed = time.perf_counter() - started
    if loss_log is not None:
        loss_log.close()
    if rank == 0:
        if done:
            print(f"{done} steps in {elapsed:.2f} s ({done / elapsed:.1f} steps/s)", flush=True)
        print(f"final loss {loss_value!r}", flush=True)
    ckpts.wait()  # every background save is durable before we report success
    tg.finish()
    if distributed:
        dist.barrier()
        # Tearing gloo down can deadlock (the destructor waits, holding the GIL, on a gloo
        # thread that needs the GIL to free the last all-gather's tensors: seen in ~1 of 10 runs,
        # cf. pytorch/pytorch#56297). Everything is saved and flushed: leave without destructors.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
