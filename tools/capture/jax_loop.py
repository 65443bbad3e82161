#!/usr/bin/env python
"""A JAX training loop as people write it without Flax: a jitted train step
(value_and_grad + SGD with momentum) over a deep residual MLP, batch after
batch.  XLA preallocates a fraction of the card (``XLA_PYTHON_CLIENT_MEM_FRACTION``),
so a card is emulated by setting that fraction from ``--gpu_gib`` before JAX
starts; an OOM is XLA's ``RESOURCE_EXHAUSTED``, never PyTorch's.

    python jax_loop.py --gpu_gib 11 --batch_size 65536 --width 4096 --depth 24 --steps 10

Data are random.  No memory snapshot exists for JAX (oompost.record is PyTorch's).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def _set_fraction(gpu_gib: float) -> None:
    total_mib = float(subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits",
                                      "-i", "0"], capture_output=True, text=True, check=True).stdout.split()[0])
    fraction = gpu_gib * 1024 / total_mib
    os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{fraction:.4f}"
    print(f"[capture] emulating a {gpu_gib:.2f} GiB card: XLA_PYTHON_CLIENT_MEM_FRACTION={fraction:.4f}",
          flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--gpu_gib", type=float, default=None, help="scenario: the card's memory to emulate")
    p.add_argument("--batch_size", type=int, default=4096)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--depth", type=int, default=24)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--report", default=None, help="write a completion report to this JSON file")
    # run.py passes these to every loop; JAX has no PyTorch recorder or allocator cap
    p.add_argument("--oompost_capture", default=None, help=argparse.SUPPRESS)
    p.add_argument("--max_entries", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--emulate_card", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.gpu_gib:
        _set_fraction(args.gpu_gib)

    import jax
    import jax.numpy as jnp

    print(f"jax {jax.__version__}, devices: {jax.devices()}", flush=True)
    key = jax.random.PRNGKey(0)
    keys = jax.random.split(key, args.depth + 2)
    scale = 1.0 / args.width ** 0.5
    params = {"w_in": jax.random.normal(keys[0], (256, args.width)) * 0.06,
              "blocks": [jax.random.normal(k, (args.width, args.width)) * scale for k in keys[1:-1]],
              "w_out": jax.random.normal(keys[-1], (args.width, 10)) * scale}
    n = sum(x.size for x in jax.tree_util.tree_leaves(params))
    print(f"residual MLP: {n / 1e6:.1f}M parameters, depth {args.depth}, width {args.width}; "
          f"batch {args.batch_size}", flush=True)

    def loss_fn(p, x, y):
        h = jax.nn.gelu(x @ p["w_in"])
        for w in p["blocks"]:
            h = h + jax.nn.gelu(h @ w)
        logits = h @ p["w_out"]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 10), axis=-1))

    @jax.jit
    def train_step(p, m, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        m = jax.tree_util.tree_map(lambda a, b: 0.9 * a + b, m, g)
        p = jax.tree_util.tree_map(lambda a, b: a - 1e-3 * b, p, m)
        return p, m, loss

    momentum = jax.tree_util.tree_map(jnp.zeros_like, params)
    t0 = time.time()
    for step in range(1, args.steps + 1):
        kx, ky, key = jax.random.split(key, 3)
        x = jax.random.normal(kx, (args.batch_size, 256))
        y = jax.random.randint(ky, (args.batch_size,), 0, 10)
        params, momentum, loss = train_step(params, momentum, x, y)
        print(f"step {step}: loss {float(loss):.4f} ({time.time() - t0:.1f}s)", flush=True)
    if args.report:
        import json

        with open(args.report, "w") as f:
            json.dump({"args": vars(args), "steps_completed": args.steps, "seconds": time.time() - t0}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
