"""DeepSpeed's own stdout, across versions (reference/deepspeed.md §1).

Every signal is optional: DeepSpeed ≥0.17.6 logs at WARNING by default, so a
modern log may hold none of the INFO lines.  Recognised:

- logger prefix ``[ts] [LEVEL] [file.py:N:func] msg`` (line numbers ignored)
- version (``DeepSpeed info: version=...``, ds_report's ``deepspeed info ...``)
- the engine config dump (``  key ...... value``) and ``json = {...}``
  (multi-line, collected until the braces balance); a DeepSpeed config
  printed as one-line JSON by the user's script is taken as well
- ZeRO stage and bucket lines, ``CPU Offload``, flatten location
- ``see_memory_usage`` (label line, MA/Max_MA/CA/Max_CA in GiB, host VM line)
- "N pytorch allocator cache flushes since last step"
- the throughput timer's MemAllocated/MaxMemAllocated, ``step=N, skipped=...``
- persistent-parameter and partition-count lines
"""

from __future__ import annotations

import json
import re

from ..model import DsConfigSeen, MemoryReading
from ..sources import LogLine
from ..units import GiB
from .base import EvidenceBuilder, TracebackTracker, line_rank, literal_trigger, ref

LOGGER = re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)\] \[(?P<lvl>[A-Z]+)\] "
                    r"\[(?P<file>[\w.]+):\d+:(?P<func>\w+)\] (?P<msg>.*)$")
VERSION = re.compile(r"DeepSpeed info: version=(?P<v>[\w.+-]+)|deepspeed info \.+ (?P<v2>\d+\.\d+\.\d+[\w.+-]*)")
DUMP_HEADER = "DeepSpeedEngine configuration:"
DUMP_ITEM = re.compile(r"^\s{2}(?P<key>\w+) \.*\s?(?P<val>.*)$")
JSON_START = re.compile(r"^\s*json = (?P<rest>\{.*)$")
CREATING = re.compile(r"Creating (?P<dtype>torch\.\w+|fp16) ZeRO stage (?P<stage>\d) optimizer")
BUCKET = re.compile(r"^(?P<which>Reduce|Allgather|Prefetch) bucket size (?P<n>[\d.e+]+)")
CPU_OFFLOAD = re.compile(r"^CPU Offload: (?P<v>True|False)")
FLATTEN = re.compile(r"Flattening param group \d+ on (?P<where>CPU|\w+) \((?P<why>[\w ]+)\)")
MA_LINE = re.compile(r"MA (?P<ma>[\d.]+) GB\s+Max_MA (?P<mma>[\d.]+) GB\s+CA (?P<ca>[\d.]+) GB\s+Max_CA (?P<mca>[\d.]+) GB")
VM_LINE = re.compile(r"CPU Virtual Memory:\s+used = (?P<used>[\d.]+) GB, percent = (?P<pct>[\d.]+)%")
FLUSHES = re.compile(r"(?P<n>\d+) pytorch allocator cache flushes since last step")
THROUGHPUT = re.compile(r"(?:global_step=(?P<gs>\d+)|^\s*(?:\[Rank \d+\]\s*)?\d+/(?P<gs2>\d+),).*?"
                        r"MemAllocated=(?P<ma>[\d.]+)GB, MaxMemAllocated=(?P<mma>[\d.]+)GB")
PROGRESS = re.compile(r"\bstep=(?P<step>\d+), skipped=(?P<skipped>\d+)")
PERSISTENT = re.compile(r"Total persistent parameters: (?P<numel>\d+) in (?P<n>\d+) params|"
                        r"Persistent parameters statistics: param_count = (?P<n2>\d+), numel = (?P<numel2>\d+)")
PARTITION = re.compile(r"partition count \[(?P<count>\d+)\] and sizes\[\((?P<numel>\d+), (?:True|False)\)")
DS_CFG_KEYS = ("zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size",
               "gradient_accumulation_steps")
INLINE_JSON = re.compile(r"(?P<json>\{\".*\})\s*$")
# the engine prints zero_config as a pydantic repr: "... offload_param=DeepSpeedZeroOffloadParamConfig(device='cpu', ..."
OFFLOAD_REPR = re.compile(r"offload_(?P<what>optimizer|param)=(?:None|DeepSpeedZeroOffload\w+Config\(device='(?P<dev>\w+)')")

TRIGGERS = ("DeepSpeed info", "deepspeed info", "ZeRO stage", "bucket size", "CPU Offload", "MA ",
            "CPU Virtual Memory", "cache flushes", "MemAllocated", "skipped=", "persistent param",
            "Persistent param", "partition count", "json = ", "Flattening", "zero_optimization",
            "train_micro_batch_size_per_gpu")


class DeepSpeedLogParser:
    SENTINELS = TRIGGERS + (DUMP_HEADER,)
    TRIGGER = literal_trigger(SENTINELS)

    @property
    def busy(self) -> bool:
        return self._in_dump or self._json is not None
    def __init__(self, path: str, out: EvidenceBuilder, *, rank_hint: int | None = None,
                 tracebacks: TracebackTracker | None = None) -> None:
        self.path = path
        self.out = out
        self.rank_hint = rank_hint
        self._in_dump = False
        self._json: dict | None = None          # {"lines": [...], "depth": int, "ln": LogLine}
        self._prev_msg: str = ""
        self._ma_pending: MemoryReading | None = None

    # -------------------------------------------------------------- feed

    def feed(self, ln: LogLine) -> None:
        text = ln.text
        if self._json is not None:
            self._feed_json(text)
            return
        m = LOGGER.match(text)
        msg = m.group("msg") if m else text
        if self._in_dump and m is None:
            return                  # a multi-line value of the dump (e.g. a pretty-printed sub-config)
        if m is None and not any(t in text for t in TRIGGERS):
            self._prev_msg = text.strip()
            return
        rank = line_rank(ln, self.rank_hint)
        if self._in_dump:
            if DUMP_ITEM.match(msg) and not JSON_START.match(msg):
                self._dump_item(msg, ln)
                self._prev_msg = msg
                return
            self._in_dump = False
        self._dispatch(msg, ln, rank)
        self._prev_msg = msg.strip()

    def finish(self) -> None:
        if self._json is not None:
            self.out.warn(self.path, "DeepSpeed 'json = {' dump ends before its closing brace", self._json["ln"].lineno)
            self._json = None

    # ---------------------------------------------------------- dispatch

    def _dispatch(self, msg: str, ln: LogLine, rank: int | None) -> None:
        r = lambda: ref(self.path, ln)  # noqa: E731
        if DUMP_HEADER in msg:
            self._in_dump = True
            return
        mj = JSON_START.match(msg)
        if mj:
            self._json = {"lines": [mj.group("rest")], "depth": 0, "ln": ln}
            self._json["depth"] = _brace_delta(mj.group("rest"))
            if self._json["depth"] <= 0:
                self._close_json()
            return
        if (mv := VERSION.search(msg)):
            self.out.fact("deepspeed.version", mv.group("v") or mv.group("v2"), r())
            return
        if (mc := CREATING.search(msg)):
            self.out.fact("deepspeed.zero_stage", int(mc.group("stage")), r())
            if mc.group("dtype").startswith("torch."):
                self.out.fact("deepspeed.dtype", mc.group("dtype").split(".")[1], r())
            return
        if (mb := BUCKET.match(msg.strip())):
            key = {"Reduce": "reduce_bucket_size", "Allgather": "allgather_bucket_size",
                   "Prefetch": "stage3_prefetch_bucket_size"}[mb.group("which")]
            try:
                self.out.fact(f"deepspeed.{key}", int(float(mb.group("n"))), r())
            except (ValueError, OverflowError):   # "e", "1.2.3", "1e999": not a size
                pass
            return
        if (mo := CPU_OFFLOAD.match(msg.strip())):
            self.out.fact("deepspeed.cpu_offload", mo.group("v") == "True", r())
            return
        if (mf := FLATTEN.search(msg)):
            self.out.fact("deepspeed.flatten_on", "cpu" if mf.group("where") == "CPU" else "gpu", r())
            return
        if (mm := MA_LINE.search(msg)):
            label = self._label(ln)
            self.out.memory.append(MemoryReading(
                r(), label=label[:120], rank=rank if rank is not None else 0,
                allocated=_gib(mm.group("ma")), max_allocated=_gib(mm.group("mma")),
                reserved=_gib(mm.group("ca")), max_reserved=_gib(mm.group("mca"))))
            self.out.fact("deepspeed.see_memory_usage", label[:120], r())
            return
        if (mvm := VM_LINE.search(msg)):
            used, pct = float(mvm.group("used")), float(mvm.group("pct"))
            self.out.fact("host.used_bytes", int(used * GiB), r())
            if pct > 0:
                self.out.fact("host.total_bytes", int(used * GiB * 100 / pct), r())
                self.out.fact("host.percent", pct, r())
            return
        if (mfl := FLUSHES.search(msg)):
            self.out.fact("deepspeed.cache_flushes", int(mfl.group("n")), r())
            return
        if (mt := THROUGHPUT.search(msg)):
            step = int(mt.group("gs") or mt.group("gs2"))
            self.out.memory.append(MemoryReading(r(), label="throughput", step=step, rank=rank,
                                                 allocated=_gib(mt.group("ma")),
                                                 max_allocated=_gib(mt.group("mma"))))
            return
        if (mp := PROGRESS.search(msg)):
            self.out.fact("deepspeed.step", int(mp.group("step")), r())
            return
        if (mpp := PERSISTENT.search(msg)):
            numel = mpp.group("numel") or mpp.group("numel2")
            self.out.fact("deepspeed.persistent_numel", int(numel), r())
            return
        if (mpa := PARTITION.search(msg)):
            self.out.fact("deepspeed.partition_numel", int(mpa.group("numel")), r())
            self.out.fact("deepspeed.partition_count", int(mpa.group("count")), r())
            return
        if '{"' in msg and any(k in msg for k in DS_CFG_KEYS):
            mi = INLINE_JSON.search(msg)
            if mi:
                try:
                    cfg = json.loads(mi.group("json"))
                except ValueError:
                    return
                if isinstance(cfg, dict) and any(k in cfg for k in DS_CFG_KEYS):
                    self.out.ds_config(DsConfigSeen(cfg, r(), origin="log"))

    def _label(self, ln: LogLine) -> str:
        """see_memory_usage prints its label on the line before the MA line."""
        prev = ln.prev
        m = LOGGER.match(prev)
        return (m.group("msg") if m else prev).strip()

    def _dump_item(self, msg: str, ln: LogLine) -> None:
        m = DUMP_ITEM.match(msg)
        if not m:
            return
        key, val = m.group("key"), m.group("val").strip()
        r = ref(self.path, ln)
        self.out.fact(f"deepspeed.effective.{key}", val, r)
        if key == "zero_optimization_stage" and val.isdigit():
            self.out.fact("deepspeed.zero_stage", int(val), r)
        elif key == "world_size" and val.isdigit():
            self.out.fact("world_size", int(val), r)
        elif key == "zero_config":
            for mo in OFFLOAD_REPR.finditer(val):
                if mo.group("dev"):
                    self.out.fact(f"deepspeed.offload_{mo.group('what')}", mo.group("dev"), r)

    # -------------------------------------------------------------- json

    def _feed_json(self, text: str) -> None:
        assert self._json is not None
        m = LOGGER.match(text)
        piece = m.group("msg") if m else text
        self._json["lines"].append(piece)
        self._json["depth"] += _brace_delta(piece)
        if self._json["depth"] <= 0 or len(self._json["lines"]) > 5000:
            self._close_json()

    def _close_json(self) -> None:
        assert self._json is not None
        raw = "\n".join(self._json["lines"])
        ln: LogLine = self._json["ln"]
        self._json = None
        try:
            cfg = json.loads(raw)
        except ValueError as e:
            self.out.warn(self.path, f"DeepSpeed 'json = {{' dump is not valid JSON ({e})", ln.lineno)
            return
        if isinstance(cfg, dict):
            self.out.ds_config(DsConfigSeen(cfg, ref(self.path, ln, "json = {…}"), origin="log"))


def _brace_delta(s: str) -> int:
    return s.count("{") - s.count("}")


def _gib(x: str) -> int:
    return int(float(x) * GiB)
