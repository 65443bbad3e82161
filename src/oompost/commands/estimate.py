"""``oompost estimate``: per-GPU memory for a training set-up, before running it.

ds_config values are the base; explicit options override them.  Exit codes
(DESIGN.md): 0 estimated (whether it fits or not), 2 usage error (click),
3 unusable input (unreadable model config or ds_config), one line on stderr.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from oompost.errors import InputError
from oompost.estimate.memory import Estimate, TrainSetup, estimate as run_estimate
from oompost.estimate.models import ModelSpec, load_model_spec
from oompost.dsconfig.model import load_ds_config
from oompost.units import GiB, parse_human_size_arg

__all__ = ["estimate"]

_OFFLOAD = click.Choice(["none", "cpu", "nvme"])


def _gpu_mem(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """'24GiB', '80GB', '40G' → bytes, always binary (GB = GiB, as torch prints).
    A bare number is GiB ('80' = 80 GiB); one too large to be GiB is refused."""
    if value is None:
        return None
    bare = value.strip().replace("_", "")
    try:
        if bare and bare.replace(".", "", 1).isdigit():
            gib_count = float(bare)
            if gib_count > 16384:
                raise click.BadParameter(f"{value!r} GiB per GPU is not a GPU; give a unit, e.g. 80GiB")
            bare += "GiB"
        n = parse_human_size_arg(bare)
    except ValueError:
        raise click.BadParameter(f"not a size: {value!r} (e.g. 24GiB, 80GB, 40G)") from None
    if n <= 0:
        raise click.BadParameter("must be positive")
    return n


def _fail(ctx: click.Context, message: str) -> None:
    click.echo(f"oompost estimate: error: {message}", err=True)
    ctx.exit(3)


@click.command("estimate")
@click.option("--model", "model_arg", required=True, metavar="CONFIG.json|PRESET",
              help="HF config.json (or its directory), a preset (7b, 13b, llama3-8b, qwen2.5-0.5b …) or a count (34B).")
@click.option("--ds-config", "ds_config", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="DeepSpeed config; without it the run is plain PyTorch (DDP when several GPUs).")
@click.option("--gpus", type=click.IntRange(min=1), default=1, show_default=True, help="GPUs per node.")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--gpu-mem", "gpu_mem", callback=_gpu_mem, default=None, metavar="SIZE",
              help="Memory per GPU the process may use, e.g. 24GiB, 80GB, 80 (= GiB; binary units). Default 80GiB.")
@click.option("--micro-batch", type=click.IntRange(min=1), default=None,
              help="Micro-batch per GPU (default: ds_config's train_micro_batch_size_per_gpu, else 1).")
@click.option("--seq-len", type=click.IntRange(min=1), default=2048, show_default=True)
@click.option("--grad-accum", "grad_accum", type=click.IntRange(min=1), default=None,
              help="Micro-batches per optimizer step (default: ds_config's gradient_accumulation_steps, else 1).")
@click.option("--grad-ckpt/--no-grad-ckpt", "grad_ckpt", default=False, show_default=True,
              help="Gradient checkpointing (full recompute of each block).")
@click.option("--attn", type=click.Choice(["eager", "sdpa", "flash"]), default="sdpa", show_default=True)
@click.option("--lora-rank", type=click.IntRange(min=1), default=None, help="LoRA rank (q,k,v,o); omit for full fine-tune.")
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp32"]), default=None,
              help="Overrides the ds_config's bf16/fp16 (without either section DeepSpeed trains in fp32; "
                   "default bf16 without a ds_config).")
@click.option("--amp/--no-amp", "amp", default=True, show_default=True,
              help="Plain PyTorch only: AMP over an fp32 model, or the model itself in the 16-bit dtype.")
@click.option("--optimizer-offload", type=_OFFLOAD, default=None, help="Overrides zero_optimization.offload_optimizer.")
@click.option("--param-offload", type=_OFFLOAD, default=None, help="Overrides zero_optimization.offload_param.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.pass_context
def estimate(ctx: click.Context, model_arg: str, ds_config: Path | None, gpus: int, nodes: int,
             gpu_mem: int | None, micro_batch: int | None, seq_len: int, grad_accum: int | None, grad_ckpt: bool,
             attn: str, lora_rank: int | None, dtype: str | None, amp: bool, optimizer_offload: str | None,
             param_offload: str | None, fmt: str) -> None:
    """Per-GPU memory breakdown of a training set-up and whether it fits."""
    try:
        spec = load_model_spec(model_arg)
    except InputError as exc:
        _fail(ctx, str(exc))
        return
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--model") from None

    overrides: dict[str, Any] = {
        "world_size": gpus * nodes, "nodes": nodes, "seq_len": seq_len, "grad_ckpt": grad_ckpt,
        "attn": attn, "lora_rank": lora_rank, "dtype": dtype, "micro_batch": micro_batch,
        "offload_optimizer": optimizer_offload, "offload_param": param_offload, "grad_accum_steps": grad_accum,
    }
    try:
        if ds_config is not None:
            model, _ = load_ds_config(ds_config)            # the one ds_config reader (hjson, like DeepSpeed)
            if dtype is None:
                overrides["dtype"] = model.precision.value
            setup = TrainSetup.from_ds_config(dict(model.raw), **overrides)
        else:
            if (optimizer_offload or "none") != "none" or (param_offload or "none") != "none":
                raise click.UsageError("offload needs DeepSpeed: pass --ds-config with a ZeRO stage")
            setup = TrainSetup(deepspeed=False, torch_amp=amp,
                               **{k: v for k, v in overrides.items() if v is not None})
        result = run_estimate(spec, setup, device_bytes=gpu_mem)
    except InputError as exc:
        _fail(ctx, str(exc))
        return
    except ValueError as exc:
        _fail(ctx, f"cannot estimate: {exc}")
        return

    if fmt == "json":
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        click.echo(render_table(spec, result))


# --------------------------------------------------------------------- table

_ROWS = (
    ("weights", "weights"),
    ("gradients", "gradients"),
    ("optimizer", "optimizer (fp32 master + states + fp32 grads + step temps)"),
    ("activations", "activations (saved for backward + backward working set)"),
    ("logits", "logits + loss temporaries"),
    ("buckets", "DeepSpeed/DDP buckets, ZeRO-3 gathered parameters"),
    ("workspace", "cuBLAS workspaces"),
    ("allocator_overhead", "allocator cache (reserved, not reusable at the peak)"),
    ("context", "CUDA context"),
    ("nccl", "NCCL"),
)

_PHASES = ("initialize", "forward", "backward", "optimizer step")


def _gib(n: int | float) -> str:
    return f"{n / GiB:9.2f} GiB"


def _describe_setup(setup: TrainSetup) -> str:
    if setup.deepspeed:
        mode = f"DeepSpeed ZeRO-{setup.zero_stage}"
        off = []
        if setup.effective_offload_optimizer != "none":
            off.append(f"optimizer→{setup.effective_offload_optimizer}")
        if setup.effective_offload_param != "none":
            off.append(f"params→{setup.effective_offload_param}")
        if off:
            mode += f" (offload {', '.join(off)})"
    else:
        mode = "PyTorch DDP" if setup.world_size > 1 else "PyTorch"
    tune = f"LoRA r={setup.lora_rank}" if setup.lora_rank else "full fine-tune"
    ckpt = "grad checkpointing" if setup.grad_ckpt else "no grad checkpointing"
    return (f"{mode}, {setup.dtype}, {setup.world_size // setup.nodes} GPU(s) × {setup.nodes} node(s); "
            f"micro-batch {setup.micro_batch} × seq {setup.seq_len}, {setup.attn} attention, {ckpt}, {tune}")


def render_table(spec: ModelSpec, result: Estimate) -> str:
    """Readable per-GPU breakdown, start-up vs step peak, host RAM, verdict, assumptions."""
    b = result.breakdown
    lines = [f"oompost estimate: {spec.name} ({result.n_params / 1e9:.2f}B params"
             + (f", {result.trainable_params:,} trainable" if result.trainable_params != result.n_params else "")
             + ")",
             _describe_setup(result.setup), "",
             f"per GPU, at the peak ({result.peak_phase or 'start-up'})"]
    for key, label in _ROWS:
        lines.append(f"  {label:<60}{_gib(b.get(key, 0))}")
    lines.append(f"  {'step peak (sum)':<60}{_gib(result.step_peak_bytes)}")
    held = "deepspeed.initialize" if result.setup.deepspeed else "the model load"
    extra = f"   (weights + {b['startup_extra'] / GiB:.2f} GiB held during {held})" \
        if b["startup_extra"] > 0 else ""
    lines.append(f"  {'start-up peak':<60}{_gib(result.startup_peak_bytes)}{extra}")
    if result.generation_peak_bytes is not None:
        lines.append(f"  {'generation peak (incl. KV cache ' + format(b['kv_cache'] / GiB, '.2f') + ' GiB)':<60}"
                     f"{_gib(result.generation_peak_bytes)}")
    lines.append(f"  {'predicted peak (reserved + outside PyTorch)':<60}{_gib(result.predicted_peak_bytes)}")
    phases = [f"{p} {result.phase_peaks[p] / GiB:.2f}" for p in _PHASES if p in result.phase_peaks]
    if phases:
        lines.append(f"  live tensors + outside PyTorch by phase (GiB): {', '.join(phases)}")
    verdict = "fits" if result.fits else "DOES NOT FIT"
    margin = result.device_bytes - result.predicted_peak_bytes
    which = result.peak_phase or "start-up"
    lines.append(f"  vs {result.device_bytes / GiB:.2f} GiB per GPU: {verdict} "
                 f"({'headroom' if margin >= 0 else 'short by'} {abs(margin) / GiB:.2f} GiB; peak at {which})")
    lines.append("")
    lines.append(f"host RAM per node  {result.host_bytes / GiB:.2f} GiB "
                 f"(pinned {result.host_pinned_bytes / GiB:.2f} GiB; per rank {result.host_bytes_per_rank / GiB:.2f} GiB)")
    host = {k: v for k, v in result.host_breakdown.items() if v}
    if host:
        lines.append("  per rank: " + ", ".join(f"{k} {v / GiB:.2f} GiB" for k, v in host.items()))
    lines.append("")
    lines.append("assumptions")
    lines += [f"  - {a}" for a in result.assumptions]
    return "\n".join(lines)
