"""The report's one fix list and its one "not worth trying" list, derived once.

Rules each return their own fixes; this module turns them into the single
ranking every renderer shows:

- only findings that hold contribute (a finding that did not hold gives no
  fix and no advice): the primary cause, and advice findings that hold;
- the rerun plan is fix #1, spelled out; a rule's fix that the plan already
  contains is folded into it;
- every fix that changes memory is priced by the same ``Pricer`` the plan
  used (one configuration, one number); an allocator setting is judged by
  the allocator replay, and said as "the recorded trace replays without
  failing", never "fits";
- fixes predicted to fit rank above unpriced ones and those predicted under
  the limit by a small margin (in the rule's own order), which rank above
  those still too large (labelled as such);
- nothing is both a fix and "not worth trying": the plan and the primary's
  own fixes win over advice, the primary's "not worth trying" over other
  findings' fixes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..analysis.context import Context
from ..classify.base import Finding, Fix, NotAFix, Severity
from ..units import fmt_bytes
from .pricing import HEADROOM_WARN, Pricer, uncertainty, verdict
from .rerun import RerunPlan

HOLDS = 0.5

# A rule's "why" may end with its own prediction; the ranking's price replaces it.
_OWN_PRICE = re.compile(r"(;\s*predicted peak [^;]*|\s*\(replay: [^)]*\))\s*$")


@dataclass(frozen=True, slots=True)
class RankedFix:
    """One entry of the report's fix list."""

    rank: int
    fix: Fix                          # the change (for the plan: kind "plan", key "rerun plan")
    finding: Finding | None           # where it came from (None for the plan)
    why: str                          # the rule's reason, without a prediction of its own
    predicted_peak_bytes: int | None = None
    limit_bytes: int | None = None
    verdict: str = ""                 # fits | tight | too_large | replays | replay_fails | ""
    basis: str = ""                   # "model" | "replay" | ""
    note: str = ""                    # what the verdict means, in words
    plan: bool = False
    changes: tuple[str, ...] = ()     # the plan, spelled out
    folded: tuple[str, ...] = ()      # codes of rule fixes the plan contains

    @property
    def still_too_large(self) -> bool:
        return self.verdict in ("too_large", "replay_fails")

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "kind": self.fix.kind, "key": self.fix.key, "value": self.fix.value,
                "why": self.why, "from": self.finding.code if self.finding else "rerun",
                "predicted_peak_bytes": self.predicted_peak_bytes, "limit_bytes": self.limit_bytes,
                "verdict": self.verdict, "basis": self.basis, "note": self.note, "plan": self.plan,
                "changes": list(self.changes), "folded": list(self.folded)}


def holds(f: Finding) -> bool:
    h = getattr(f, "holds", None)
    return bool(h) if isinstance(h, bool) else f.confidence >= HOLDS


# a change priced under the limit, however tight, ranks with the unpriced ones (in the rule's own order): it is
# the one the numbers back (a LoRA 7B capture's checkpointing, priced 15.01 of 15.22 GiB, completed the run)
_GROUP = {"fits": 0, "replays": 0, "": 1, "tight": 1, "replays_tight": 1, "too_large": 3, "replay_fails": 3}


def rank(ctx: Context, findings: tuple[Finding, ...], rerun: RerunPlan | None,
         pricer: Pricer | None = None) -> tuple[tuple[RankedFix, ...], tuple[NotAFix, ...]]:
    pricer = pricer or Pricer(ctx)
    primary = findings[0] if findings else None
    sources: list[Finding] = []
    if primary is not None:
        sources.append(primary)        # the verdict owns the list, whatever its confidence
        # another rule that proves the same cause from other evidence (a snapshot naming what a leak keeps, beside
        # the step lines that show it growing): its fixes follow the verdict's own
        sources += [f for f in findings[1:] if f.cause is primary.cause and f.severity is Severity.CAUSE
                    and holds(f)]
    sources += [f for f in findings[1:] if f.severity is Severity.ADVICE and holds(f)]

    L = ctx.limit_bytes
    entries: list[tuple[int, int, RankedFix]] = []      # (group, order, entry)
    plan_entry = _plan_entry(rerun, L) if rerun is not None and (rerun.changes or rerun.env
                                                                  or rerun.trainer_args) else None
    folded: list[str] = []
    kept_nots: list[NotAFix] = []
    seen: set[tuple[str, str, str]] = set()
    order = 0
    for f in sources:
        is_primary = f is primary
        for x in f.fixes:
            k = (x.kind, x.key, _val(x.value))
            if k in seen:
                continue
            seen.add(k)
            if rerun is not None and _in_plan(pricer, x, rerun):
                folded.append(f"{f.code}: {x.key}")
                continue
            if rerun is not None and _conflicts_plan(x, rerun):
                continue                                   # the plan sets this key otherwise
            if not is_primary and any(_mentions(n.what, x) for n in primary.not_fixes if primary):
                continue                                   # the verdict says it does not help
            peak, v, basis, note = _price(ctx, pricer, x)
            why = _OWN_PRICE.sub("", x.why).rstrip()
            if x.key == "train_batch_size" and rerun is not None and rerun.global_batch[0] and \
                    isinstance(x.value, int) and x.value != rerun.global_batch[0]:
                why += f" (changes the global batch {rerun.global_batch[0]} → {x.value})"
            entries.append((_GROUP.get(v, 1), order, RankedFix(0, x, f, why, peak, L, v, basis, note)))
            order += 1
    fixes = [e for _, _, e in sorted(entries, key=lambda t: (t[0], t[1]))]
    if plan_entry is not None:
        plan_entry = _with(plan_entry, folded=tuple(folded))
        g = _GROUP.get(plan_entry.verdict, 1)
        # the plan is the top fix unless it is predicted not to fit while another fix fits
        pos = 0 if g <= 1 else next((i for i, e in enumerate(fixes) if _GROUP.get(e.verdict, 1) >= g), len(fixes))
        fixes.insert(pos, plan_entry)
    width, why_unsure = uncertainty(ctx)
    if why_unsure:
        fixes = [_with(e, note=f"{e.note} ({why_unsure})") if e.basis == "model" and e.note else e for e in fixes]
    fixes = [_with(e, rank=i + 1) for i, e in enumerate(fixes)]

    for f in sources:
        for n in f.not_fixes:
            if any(_norm(n.what) == _norm(m.what) for m in kept_nots):
                continue
            if any(_mentions(n.what, e.fix) or (e.plan and _plan_mentions(n.what, rerun)) for e in fixes):
                continue                                   # a fix says otherwise
            kept_nots.append(n)
    return tuple(fixes), tuple(kept_nots)


# ------------------------------------------------------------------ pricing

def fix_overrides(ctx: Context, x: Fix) -> dict[str, Any] | None:
    """The estimator fields a fix changes, or None when it is not a memory change the model prices."""
    s = ctx.setup
    v = x.value
    if x.kind == "trainer_arg":
        if x.key == "gradient_checkpointing" and v is True:
            return {"grad_ckpt": True}
        if x.key in ("per_device_train_batch_size", "train_micro_batch_size_per_gpu") and _pos_int(v):
            mb = int(s.get("micro_batch", 1) or 1)
            gas = int(s.get("grad_accum", 1) or 1)
            return {"micro_batch": int(v), "grad_accum_steps": max(1, gas * mb // int(v))}
        if x.key == "lora_r" and _pos_int(v):
            return {"lora_rank": int(v)}
        return None
    if x.kind != "ds_config":
        return None
    key = x.key.split(" + ")[0].strip()
    parts = key.split(".")
    if parts[0] == "zero_optimization" and isinstance(v, dict) and len(parts) <= 2:
        zero = dict(v) if len(parts) == 1 or parts[1] == "stage" else {parts[1]: v}
    elif parts[0] == "zero_optimization" and len(parts) >= 2:
        zero = {parts[1]: v} if len(parts) == 2 else {parts[1]: {parts[2]: v}}
    else:
        return None
    out: dict[str, Any] = {}
    stage = zero.get("stage")
    if _pos_int(stage) or stage == 0:
        out["zero_stage"] = int(stage)
    for what in ("optimizer", "param"):
        sec = zero.get(f"offload_{what}", ...)
        if sec is ...:
            continue
        dev = sec.get("device", "none") if isinstance(sec, dict) else (sec if isinstance(sec, str) else "none")
        out[f"offload_{what}"] = dev if dev in ("cpu", "nvme") else "none"
        if what == "optimizer" and out[f"offload_{what}"] != "none" and "zero_stage" not in out:
            out["zero_stage"] = max(1, int(s.get("zero_stage", 0) or 0))
    for k in ("reduce_bucket_size", "allgather_bucket_size"):
        if _pos_int(zero.get(k)):
            out[k] = int(zero[k])
    return out or None


def _price(ctx: Context, pricer: Pricer, x: Fix) -> tuple[int | None, str, str, str]:
    L = ctx.limit_bytes
    if x.kind == "env" and x.key == "PYTORCH_CUDA_ALLOC_CONF":
        cf = next((c for c in ctx.counterfactuals if getattr(c, "setting", None) == x.value), None)
        if cf is None:
            return None, "", "", ""
        peak = cf.peak_reserved_bytes
        if cf.oom:
            return peak, "replay_fails", "replay", f"the allocator replay still fails under {x.value}"
        return peak, *_replay_words(str(x.value), peak, L)
    over = fix_overrides(ctx, x)
    if over is None:
        return None, "", "", ""
    blind = pricer.blind_spot()
    if blind is not None:
        return None, "", "", "not priced: " + blind
    w = pricer.what_if(x.key, **over)
    if w is None:
        return None, "", "", ""
    v = verdict(w.peak, L)
    return w.peak, v, "model", _model_words(w.peak, L, v)


def _replay_words(setting: str, peak: int | None, limit: int | None) -> tuple[str, str, str]:
    note = f"the recorded trace replays without failing under {setting}"
    if peak is not None:
        note += f" (peak reserved {fmt_bytes(peak)})"
    if peak is not None and limit and (limit - peak) < HEADROOM_WARN * limit:
        note += f"; less than {HEADROOM_WARN:.0%} headroom under the {fmt_bytes(limit)} limit"
        return "replays_tight", "replay", note
    return "replays", "replay", note


def _model_words(peak: int, limit: int | None, v: str) -> str:
    if not limit:
        return f"predicted peak {fmt_bytes(peak)}"
    words = {"fits": "fits", "tight": "within 10 % of the limit", "too_large": "still too large"}[v]
    return f"predicted peak {fmt_bytes(peak)} of {fmt_bytes(limit)}: {words}"


def _plan_entry(r: RerunPlan, limit: int | None) -> RankedFix:
    peak = r.predicted_peak_bytes
    if r.basis == "replay":
        setting = str(r.env.get("PYTORCH_CUDA_ALLOC_CONF", "the plan's settings"))
        v, basis, note = _replay_words(setting, peak, limit)
    elif peak is not None and limit:
        v = verdict(peak, limit)
        basis, note = "model", _model_words(peak, limit, v)
    else:
        v, basis, note = "", "", "not priced: " + ("the model size is not in the inputs" if peak is None else
                                                   "the memory limit is not in the inputs")
    if r.changes_global_batch:
        note += f"; changes the global batch {r.global_batch[0]} → {r.global_batch[1]}"
    why = "; ".join(r.changes) if r.changes else "the rerun plan"
    return RankedFix(0, Fix("plan", "rerun plan", None, why), None, why, peak, limit, v, basis, note, True,
                     tuple(r.changes))


def _with(e: RankedFix, **kw: Any) -> RankedFix:
    from dataclasses import replace

    return replace(e, **kw)


# ------------------------------------------------------------------ matching

def _in_plan(pricer: Pricer, x: Fix, r: RerunPlan) -> bool:
    """The plan already makes this change (same setting, or the same priced configuration)."""
    if x.kind == "env":
        return str(r.env.get(x.key)) == str(x.value)
    if x.kind == "trainer_arg":
        if x.key in r.trainer_args:
            return r.trainer_args[x.key] == x.value
    if x.kind == "ds_config" and r.ds_config is not None:
        got = _lookup(r.ds_config, x.key)
        if got is not ... and got == x.value and _lookup(r.ds_config_diff, x.key) is not ...:
            return True
    over = fix_overrides(pricer.ctx, x)
    if over and r.overrides is not None and r.basis == "model":
        return pricer.same_config(over, r.overrides)
    return False


def _conflicts_plan(x: Fix, r: RerunPlan) -> bool:
    """The plan sets this key to something else (e.g. removes offload_param vs moves to stage 3 where it acts)."""
    if x.kind == "env" and x.key in r.env:
        return str(r.env[x.key]) != str(x.value)
    if x.kind == "trainer_arg" and x.key in r.trainer_args:
        return r.trainer_args[x.key] != x.value
    if x.kind == "ds_config" and r.ds_config is not None and " + " not in x.key:
        got = _lookup(r.ds_config, x.key)
        if x.value is None:
            return got is not ...
        return got is not ... and got != x.value and _lookup(r.ds_config_diff, x.key) is not ...
    return False


def _lookup(d: Any, key: str) -> Any:
    for p in key.split("."):
        if not isinstance(d, dict) or p not in d:
            return ...
        d = d[p]
    return d


_SYNONYMS = {
    "zero_optimization.stage": ("zero stage", "zero-3", "zero-2", "zero-1", "larger zero stage"),
    "zero_optimization.offload_optimizer": ("offload_optimizer", "offload"),
    "zero_optimization.offload_param": ("offload_param", "offload"),
    "per_device_train_batch_size": ("micro-batch", "smaller batch", "batch size"),
    "train_micro_batch_size_per_gpu": ("micro-batch", "smaller batch", "batch size"),
    "gradient_accumulation_steps": ("gradient accumulation",),
    "gradient_checkpointing": ("checkpointing",),
    "lora_r": ("lora",),
}


def _phrases(x: Fix) -> set[str]:
    out: set[str] = set()
    key = x.key.lower()
    for k in key.split(" + "):
        k = k.strip()
        out.add(k.split(".")[-1])
        out.update(_SYNONYMS.get(k, ()))
    if x.kind == "env" and isinstance(x.value, str):
        out.update(p.split(":")[0].lower() for p in x.value.split(",") if p)
    if isinstance(x.value, dict):
        out.update(k.lower() for k in x.value if isinstance(k, str) and k != "device")
        if "offload_param" in x.value or "offload_optimizer" in x.value:
            out.add("offload")
    return {p for p in out if len(p) > 3 and p not in ("stage", "code", "true", "false")}


def _mentions(text: str, x: Fix) -> bool:
    t = text.lower()
    return any(p in t for p in _phrases(x))


def _plan_mentions(text: str, r: RerunPlan | None) -> bool:
    if r is None:
        return False
    fixes: list[Fix] = [Fix("env", k, v, "") for k, v in r.env.items()]
    fixes += [Fix("trainer_arg", k, v, "") for k, v in r.trainer_args.items()]

    def walk(d: dict[str, Any], prefix: str = "") -> None:
        for k, v in d.items():
            if isinstance(v, dict) and not {"device"} & set(v):
                walk(v, f"{prefix}{k}.")
            elif v is not None:
                fixes.append(Fix("ds_config", f"{prefix}{k}", v, ""))

    walk(r.ds_config_diff)
    return any(_mentions(text, f) for f in fixes)


def _norm(s: str) -> str:
    return " ".join(s.lower().split())


def _val(v: Any) -> str:
    return repr(v)


def _pos_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0
