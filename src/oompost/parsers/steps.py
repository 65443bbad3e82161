"""Training-loop lines: per-step memory figures and facts about the run.

Training scripts print memory in many shapes; what they share is a step
number and one or more ``allocated`` / ``reserved`` figures with a unit
(``mem allocated=10.12GiB``, ``'memory_allocated': 10.1 GB``,
``max_reserved: 15 GB``, ``alloc_gb=3.2``).  A line with a step and at least
one figure becomes a ``MemoryReading`` — the series a leak shows in.

Facts (first seen wins in the Evidence): model parameter counts (HF Trainer's
"Number of trainable parameters", PEFT's "trainable params: … || all params",
"N parameters"), batch / accumulation / sequence settings written as
``key=value`` or HF Trainer's banner, gradient checkpointing, attention
implementation, GPU name, torch version, model name.
"""

from __future__ import annotations

import collections
import re

from ..model import MemoryReading
from ..sources import LogLine
from ..units import GiB, KiB, MiB
from .base import EvidenceBuilder, TracebackTracker, line_rank, literal_trigger, ref

STEP_BYTES = re.compile(rb"(?<![\w/])(?:global[_ ]step|step|iter(?:ation)?|it)['\"]?\s*[:=]?\s*\d{1,9}\b", re.IGNORECASE)
STEP = re.compile(r"(?<![\w/])(?:global[_ ]step|step|iter(?:ation)?|it)['\"]?\s*[:=]?\s*(?P<step>\d{1,9})\b(?!\.\d)",
                  re.IGNORECASE)
_UNIT = r"(?P<unit>GiB|GB|MiB|MB|KiB|KB|G|M)?"
MEM = re.compile(
    r"(?P<key>max[_ ]?(?:memory[_ ]?)?(?:allocated|alloc|reserved|cached)|(?:memory[_ ]|mem[_ ]?)?(?:allocated|alloc|"
    r"reserved|cached))(?P<suffix>_gib|_gb|_mib|_mb)?['\"]?\s*[:=]\s*(?P<num>\d+(?:\.\d+)?)\s*" + _UNIT + r"\b",
    re.IGNORECASE)
# a bare memory word and a figure with its unit, as loops print them: ``mem 6.95GB``, ``GPU memory: 10.2 GiB``,
# ``max_mem: 5432M`` (detectron2), ``gpu_mem=3.4G``; a unit is required, and host memory is not this
GENERIC_MEM = re.compile(
    r"(?<![\w.])(?<!host )(?<!cpu )(?<!CPU )(?<!RAM )(?<!system )(?P<key>(?:max[_ ]?)?(?:gpu[_ ]?|cuda[_ ]?|GPU[_ ]|"
    r"CUDA[_ ])?mem(?:ory)?(?:[_ ](?:used|usage))?)['\"]?\s*[:=]?\s*(?P<num>\d+(?:\.\d+)?)\s*"
    r"(?P<unit>GiB|GB|MiB|MB|G|M)\b", re.IGNORECASE)
# the figure named in words, no separator: ``memory allocated 7.61 GiB``, ``max reserved 9.2 GB`` (a unit is
# required: ``allocated 3 tensors`` is not a figure)
WORDED_MEM = re.compile(r"(?<![\w.])(?P<key>(?:max(?:imum)?[_ ])?(?:(?:gpu|cuda)[_ ])?(?:memory[_ ])?"
                        r"(?:allocated|reserved|cached))\s+(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>GiB|GB|MiB|MB)\b",
                        re.IGNORECASE)
# lines that carry memory figures but are not a loop's print: the OOM message, memory_summary() tables
_NOT_A_PRINT = ("out of memory", "Tried to allocate", "OutOfMemory", "|", "already allocated", "free;")
_UNITS = {"b": 1, "gib": GiB, "gb": GiB, "g": GiB, "mib": MiB, "mb": MiB, "m": MiB, "kib": KiB, "kb": KiB,
          "_gib": GiB, "_gb": GiB, "_mib": MiB, "_mb": MiB}

PARAMS = (
    re.compile(r"all params:\s*(?P<n>[\d,]+)"),                                        # PEFT
    re.compile(r"Number of (?:trainable )?parameters\s*=\s*(?P<n>[\d,]+)"),           # HF Trainer
    re.compile(r"(?P<n>\d{1,3}(?:,\d{3}){2,}|\d{7,})\s+(?:total\s+)?param(?:eter)?s\b", re.IGNORECASE),
    re.compile(r"(?:total|num|n)[_ ]?param(?:eter)?s\s*[:=]\s*(?P<n>[\d,]{7,})", re.IGNORECASE),
    re.compile(r"(?P<n>\d+(?:\.\d+)?)\s*(?P<u>[BM])\s+(?:total\s+)?param(?:eter)?s\b"),
    # in words, any case: EasyDeL's "Model Contain  1.100048384  Billion Parameters"
    re.compile(r"(?P<n>\d+(?:\.\d+)?)\s+(?P<u>billion|million)\s+(?:total\s+)?param(?:eter)?s\b", re.IGNORECASE),
)
TRAINABLE = re.compile(r"trainable params:\s*(?P<n>[\d,]+)|(?P<n2>[\d,]{7,}) trainable\b")
KV_INT = re.compile(r"\b(?P<key>per_device_train_batch_size|per_device_eval_batch_size|train_micro_batch_size_per_gpu|"
                    r"micro_batch_size|"
                    r"gradient_accumulation_steps|max_seq_length|max_length|seq_len|sequence_length|block_size|"
                    r"model_max_length|max_steps|world_size|lora_r)\s*[=:]\s*(?P<v>\d+)\b")
HF_BANNER = (
    (re.compile(r"Instantaneous batch size per device = (?P<v>\d+)"), "per_device_train_batch_size"),
    (re.compile(r"Gradient Accumulation steps = (?P<v>\d+)"), "gradient_accumulation_steps"),
    (re.compile(r"Total train batch size \(w\. parallel, distributed & accumulation\) = (?P<v>\d+)"),
     "total_train_batch_size"),
)
# the HF Trainer's evaluation banner: "***** Running Evaluation *****", "  Num examples = 128", "  Batch size = 64"
EVAL_BANNER = re.compile(r"\*{3,} Running (?:Evaluation|Prediction) \*{3,}")
EVAL_BATCH = re.compile(r"(?:^|[\s:\]-])Batch size = (?P<v>\d+)\s*$")
GRAD_CKPT = re.compile(r"gradient_checkpointing\s*[=:]\s*(?P<v>True|False|true|false|1|0)\b")
GRAD_CKPT_ON = ("incompatible with gradient checkpointing", "Gradient checkpointing enabled",
                "gradient_checkpointing_enable")
ATTN = re.compile(r"attn_implementation\s*[=:]\s*['\"]?(?P<v>eager|sdpa|flash_attention_[23]|flex_attention)")
GPU = re.compile(r"\b(?P<v>NVIDIA (?:H100|H200|A100|A10G?|A6000|L4|L40S?|V100|T4|RTX ?\w+|GeForce RTX \d+\w*|"
                 r"B200|GB200|A800|H800|H20)[\w -]*?)(?=,|\s\||\)|$|\s{2})")
TORCH_VER = re.compile(r"\b(?:torch|PyTorch)(?: version)?[ =:]+(?:\.+ )?(?P<v>\d+\.\d+\.\d+(?:\+\w+)?)")
MODEL_NAME = re.compile(r"(?:model_name_or_path|model_name|pretrained_model_name_or_path)\s*[=:]\s*['\"]?"
                        r"(?P<v>[\w./-]+)")

BATCH_SHAPE = re.compile(r"(?:input_ids|batch|shape)[^\n]{0,40}?(?:torch\.Size\(\[|\[|\()(?P<b>\d+), (?P<s>\d{2,6})[\])]")
TOKENS = re.compile(r"padded to (?P<v>\d{2,7}) tokens|\b(?P<v2>\d{3,7})-token (?:document|sample|sequence)")

_BOOL = {"true": True, "1": True, "false": False, "0": False}


# what any pattern below needs (the driver offers a line only when this matches)
TRIGGERS = ("alloc", "reserved", "cached", "param", "Param", "PARAM", "per_device_train_batch_size", "micro_batch",
            "per_device_eval_batch_size", "Running Evaluation", "Running Prediction", "Batch size = ", "'loss':",
            "gradient_accumulation_steps", "max_seq_length", "max_length", "seq_len", "sequence_length",
            "block_size", "model_max_length", "max_steps", "world_size", "lora_r", "Instantaneous batch size",
            "Gradient Accumulation steps", "Total train batch size", "gradient_checkpointing",
            "checkpointing", "attn_implementation", "NVIDIA", "torch ", "PyTorch", "torch version", "model_name",
            "seq ", "padded to", "-token ", "torch.Size", "mem", "Mem",
            # upper case only as a word of its own: NCCL prints "P2P/CUMEM" on every channel line of a long run
            "_MEM", " MEM", "MEM:", "MEM=", "MEM ")


class StepParser:
    SENTINELS = TRIGGERS
    TRIGGER = literal_trigger(TRIGGERS)
    busy = False

    def __init__(self, path: str, out: EvidenceBuilder, *, rank_hint: int | None = None,
                 tracebacks: TracebackTracker | None = None) -> None:
        self.path = path
        self.out = out
        self.rank_hint = rank_hint
        self._seen_facts: set[str] = set()
        self._done: set[str] = set()          # single-valued facts already found
        self._tails: dict[int | None, collections.deque] = {}
        self._history: dict[int | None, list[LogLine]] = {}
        self._seen_steps: dict[int | None, int] = {}
        self._stride: dict[int | None, int] = {}
        self._layouts: dict[bytes, tuple[_Layout | None, tuple[int, int] | None]] = {}
        # memory prints without a step number, by rank and line shape (the line with its numbers as #)
        self._prints: dict[tuple[int | None, str], collections.deque] = {}
        self._eval_banner: int | None = None     # line number of the last HF evaluation banner
        self._banner_line: LogLine | None = None
        self._train_log: int | None = None       # line number of the last HF training log dict ({'loss': ...})

    # Step lines can be most of a 100 MB log.  They are kept cheaply (the last
    # KEEP of each rank, plus every 2**k-th earlier one within a bound) and parsed
    # at the end: the series needs its tail in full (the leak test) and only a
    # sketch of its history (the timeline).
    KEEP = 2048
    HISTORY = 2048

    def feed(self, ln: LogLine) -> None:
        text = ln.text
        if text.lstrip().startswith(("File \"", "^")) or " NCCL INFO " in text:
            return                  # a frame, or NCCL's debug log ("via P2P/CUMEM", "cuMem"): no figure of ours
        memory_word = ("lloc" in text or "reserved" in text or "cached" in text or "ALLOC" in text
                       or "mem" in text or "Mem" in text or "MEM" in text)
        if memory_word:
            if STEP.search(text) is not None:
                self._keep(ln)
                return
            self._unnumbered(text, ln)
        self._facts(text, ln)

    def raw_shape(self, shape: bytes) -> int | None:
        """Fast path for lines only this parser wants, decided once per line shape (the line with
        its digits turned into 0s, which reads the same to every test here): a step line with
        memory figures is kept undecoded (decoded at the end only if it survives the thinning).
        Returns where its ``[rankN]`` prefix closes (0: no prefix), or None when such lines need
        the normal path."""
        if not (b"lloc" in shape or b"reserved" in shape or b"cached" in shape) or STEP_BYTES.search(shape) is None:
            return None
        if shape.startswith(b"[rank"):
            close = shape.find(b"]:", 5, 12)
            return close if close > 5 and shape[5:close].isdigit() else None
        if shape[:1] in (b"[", b"(") or shape[:1].isdigit():
            return None                       # another prefix style: take the normal path
        return 0

    def take_raw(self, items: list[tuple[int, bytes, bytes, int]]) -> None:
        """Lines of shapes ``raw_shape`` accepted, in file order: ``(lineno, raw, prev, close)``.
        Kept per rank in bulk, the same as one ``_keep_item`` each."""
        by_rank: dict[int | None, list] = {}
        prefixes: dict[bytes, int] = {}
        hint = self.rank_hint
        for item in items:
            close = item[3]
            if close:
                prefix = item[1][:close]
                rank = prefixes.get(prefix)
                if rank is None:
                    rank = prefixes[prefix] = int(prefix[5:])
            else:
                rank = hint
            group = by_rank.get(rank)
            if group is None:
                group = by_rank[rank] = []
            group.append(item)
        for rank, group in by_rank.items():
            self._keep_many(rank, group)

    def _tail(self, rank: int | None) -> "collections.deque":
        """The rank's last KEEP step lines (created, with its count and history, on first use)."""
        tail = self._tails.get(rank)
        if tail is None:
            tail = self._tails[rank] = collections.deque(maxlen=self.KEEP)
            self._seen_steps[rank] = 0
            self._history[rank] = []
        return tail

    def _keep_many(self, rank: int | None, items: list) -> None:
        tail = self._tail(rank)
        n = self._seen_steps[rank]
        k = len(items)
        self._seen_steps[rank] = n + k
        # the item counted c pushes out the one counted c - KEEP (once the tail is full); that one
        # joins the history when its count is a multiple of the stride at that moment
        first, end = max(n, self.KEEP) - self.KEEP, n + k - self.KEEP
        if first < end:
            base = n - len(tail)                      # the count of tail[0]
            hist = self._history[rank]
            stride = self._stride.get(rank, 1)
            e = -(-first // stride) * stride
            while e < end:
                hist.append(tail[e - base] if e < n else items[e - n])
                if len(hist) > self.HISTORY:          # thin the history, keep the stride growing
                    del hist[::2]
                    stride *= 2
                    self._stride[rank] = stride
                    e = -(-(e + 1) // stride) * stride
                else:
                    e += stride
        tail.extend(items)

    def _keep(self, ln: LogLine) -> None:
        self._keep_item(line_rank(ln, self.rank_hint), ln)

    def _keep_item(self, rank: int | None, item: object) -> None:
        tail = self._tail(rank)
        n = self._seen_steps[rank]
        self._seen_steps[rank] = n + 1
        if len(tail) == tail.maxlen:
            old = tail[0]
            stride = self._stride.get(rank, 1)
            if (n - self.KEEP) % stride == 0:
                hist = self._history[rank]
                hist.append(old)
                if len(hist) > self.HISTORY:          # thin the history, keep the stride growing
                    del hist[::2]
                    self._stride[rank] = stride * 2
        tail.append(item)

    def finish(self) -> None:
        from ..sources import decode_line

        if self._banner_line is not None and (self._train_log is None or self._eval_banner > self._train_log):
            # the log ends inside an evaluation: its banner came after the last training log line
            self.out.fact("train.evaluating_at_end", True, ref(self.path, self._banner_line))

        for rank, tail in self._tails.items():
            for item in [*self._history[rank], *tail]:
                ln = item if isinstance(item, LogLine) else decode_line(item[0], item[1], prev=item[2])[0]
                text = ln.text
                layout, seq = self._layout(text)
                if layout is not None:
                    self._memory(text, ln, rank, layout)
                if seq is not None:
                    self._fact_once("train.step_seq_len", int(text[seq[0]:seq[1]]), ln)
        self._finish_prints()

    # -------------------------------------------------------------- memory

    # A loop that prints its memory without a step number (``print(f"allocated: {a:.1f} MB")`` each
    # iteration, ``mem 6.95GB``) prints the same line shape (its numbers as ``#``) again and again: a
    # shape seen MIN_PRINTS times is a series, its prints numbered in order.  Used only for a rank with
    # no numbered step lines, and only the longest such series of the rank.  (The cue parser's
    # ``cue.memory_growing`` says that *some* figure grows, nvidia-smi's included; this reads the
    # allocator's own figures, with their units, for the leak test and its numbers.)
    MIN_PRINTS = 4
    MAX_PRINT_SHAPES = 256

    def _unnumbered(self, text: str, ln: LogLine) -> None:
        if len(text) > 400 or any(w in text for w in _NOT_A_PRINT):
            return
        shape = _NUMBER.sub("#", text.strip())        # 999.5 MB and 1000.2 MB print the same shape
        rank = line_rank(ln, self.rank_hint)
        key = (rank, shape)
        series = self._prints.get(key)
        if series is None:
            if len(self._prints) >= self.MAX_PRINT_SHAPES:
                return
            figures = _figures_of(text)
            if not figures:
                self._prints[key] = collections.deque(maxlen=0)      # remembered as "not a series"
                return
            series = self._prints[key] = collections.deque(maxlen=self.KEEP)
        if series.maxlen:
            series.append(ln)

    def _finish_prints(self) -> None:
        numbered = {r.rank for r in self.out.memory if r.step is not None}
        best: dict[int | None, collections.deque] = {}
        for (rank, _shape), series in self._prints.items():
            if len(series) >= self.MIN_PRINTS and rank not in numbered and len(series) > len(best.get(rank, ())):
                best[rank] = series
        for rank, series in best.items():
            for i, ln in enumerate(series, start=1):
                self._reading(ln, "print", i, rank, _figures_of(ln.text))

    def _memory(self, text: str, ln: LogLine, rank: int | None, layout: "_Layout") -> None:
        (a, b), figures = layout
        self._reading(ln, "step", int(text[a:b]), rank, figures)

    def _reading(self, ln: LogLine, label: str, step: int, rank: int | None,
                 figures: tuple[tuple[str, int, int, int], ...]) -> None:
        values = {slot: int(float(ln.text[c:d]) * mult) for slot, c, d, mult in figures}
        self.out.memory.append(MemoryReading(
            ref(self.path, ln), label=label, step=step, rank=rank,
            allocated=values.get("allocated"), max_allocated=values.get("max_allocated"),
            reserved=values.get("reserved"), max_reserved=values.get("max_reserved")))

    def _layout(self, text: str) -> "tuple[_Layout | None, tuple[int, int] | None]":
        """Where a step line's step number and memory figures are, and its sequence length.  The
        patterns treat every digit alike, so lines that differ only in their digits (a run prints
        thousands) share one layout, found once."""
        if not text.isascii():
            return _layout_of(text)
        shape = text.encode("ascii").translate(_ZERO)
        layout = self._layouts.get(shape)
        if layout is None:
            if len(self._layouts) > 4096:
                self._layouts.clear()
            layout = self._layouts[shape] = _layout_of(shape.decode("ascii"))
        return layout

    # --------------------------------------------------------------- facts

    def _fact_once(self, name: str, value: object, ln: LogLine) -> None:
        key = f"{name}={value}"
        if key in self._seen_facts:
            return
        self._seen_facts.add(key)
        self.out.fact(name, value, ref(self.path, ln))

    def _facts(self, text: str, ln: LogLine) -> None:
        if "model.params" not in self._done and ("param" in text or "Param" in text or "PARAM" in text):
            for rx in PARAMS:
                m = rx.search(text)
                if m:
                    n = m.group("n").replace(",", "")
                    try:
                        value = float(n)
                    except ValueError:
                        continue
                    if "u" in (m.groupdict() or {}) and m.groupdict().get("u"):
                        value *= 1e9 if m.group("u")[0] in "Bb" else 1e6
                    if value >= 1e6:
                        self._fact_once("model.params", int(value), ln)
                        self._done.add("model.params")
                    break
            mt = TRAINABLE.search(text)
            if mt:
                self._fact_once("model.trainable_params", int((mt.group("n") or mt.group("n2")).replace(",", "")), ln)
        for m in (KV_INT.finditer(text) if ("_s" in text or "length" in text or "lora_r" in text) else ()):
            key = m.group("key")
            key = {"train_micro_batch_size_per_gpu": "per_device_train_batch_size",
                   "micro_batch_size": "per_device_train_batch_size", "max_length": "max_seq_length",
                   "seq_len": "max_seq_length", "sequence_length": "max_seq_length",
                   "block_size": "max_seq_length", "model_max_length": "max_seq_length"}.get(key, key)
            self._fact_once(f"train.{key}", int(m.group("v")), ln)
        if "'loss':" in text and "eval_loss" not in text:
            self._train_log = ln.lineno
        if "Running " in text and EVAL_BANNER.search(text):
            self._eval_banner, self._banner_line = ln.lineno, ln
        elif "Batch size = " in text and self._eval_banner is not None and ln.lineno - self._eval_banner <= 4:
            m = EVAL_BATCH.search(text)
            if m:
                self._fact_once("train.per_device_eval_batch_size", int(m.group("v")), ln)
        if " = " in text:
            for rx, key in HF_BANNER:
                m = rx.search(text)
                if m:
                    self._fact_once(f"train.{key}", int(m.group("v")), ln)
        if "heckpointing" in text:
            m = GRAD_CKPT.search(text)
            if m:
                self._fact_once("train.gradient_checkpointing", _BOOL[m.group("v").lower()], ln)
            elif any(t in text for t in GRAD_CKPT_ON):
                self._fact_once("train.gradient_checkpointing", True, ln)
        if "attn_implementation" in text:
            m = ATTN.search(text)
            if m:
                self._fact_once("train.attn_implementation", m.group("v"), ln)
        if "NVIDIA" in text and "gpu.name" not in self._done:
            m = GPU.search(text)
            if m:
                self._fact_once("gpu.name", m.group("v").strip(), ln)
                self._done.add("gpu.name")
        if ("torch" in text or "PyTorch" in text) and "torch.version" not in self._done and "File" not in text:
            m = TORCH_VER.search(text)
            if m:
                self._fact_once("torch.version", m.group("v"), ln)
                self._done.add("torch.version")
        m = MODEL_NAME.search(text) if "model_name" in text else None
        if m:
            self._fact_once("model.name", m.group("v"), ln)
        if "seq " in text and "step" in text:
            m = re.search(r"\bseq(?:_len)?\s+(?P<v>\d+)\b", text)
            if m:
                self._fact_once("train.step_seq_len", int(m.group("v")), ln)
        m = BATCH_SHAPE.search(text) if ("torch.Size" in text or "shape" in text or "batch" in text) else None
        if m:
            self._fact_once("train.step_seq_len", int(m.group("s")), ln)
            self._fact_once("train.step_batch", int(m.group("b")), ln)
        elif "token" in text:
            m = TOKENS.search(text)
            if m:
                self._fact_once("train.step_seq_len", int(m.group("v") or m.group("v2")), ln)


_ZERO = bytes.maketrans(b"123456789", b"000000000")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
# the span of the step number, and (slot, start, end, bytes per unit) of the first figure of each slot
_Layout = tuple[tuple[int, int], tuple[tuple[str, int, int, int], ...]]


_SEQ = re.compile(r"\bseq(?:_len)?\s+(?P<v>\d+)\b")


def _layout_of(text: str) -> tuple[_Layout | None, tuple[int, int] | None]:
    ms = _SEQ.search(text) if "seq" in text else None
    return _memory_layout_of(text), (ms.span("v") if ms else None)


def _memory_layout_of(text: str) -> _Layout | None:
    ms = STEP.search(text)
    if ms is None:
        return None
    figures = _figures_of(text)
    if not figures:
        return None
    return ms.span("step"), figures


def _slot(key: str) -> str:
    """The reading a figure's name fills: ``allocated``, ``reserved`` or their ``max_`` peaks."""
    key = key.lower().replace(" ", "_")
    kind = "reserved" if ("reserved" in key or "cached" in key) else "allocated"
    return ("max_" if key.startswith("max") else "") + kind


def _figures_of(text: str) -> tuple[tuple[str, int, int, int], ...]:
    """(slot, start, end, bytes per unit) of the first figure of each slot: the named figures
    (allocated / reserved and their peaks) first; a bare memory word (``mem 6.95GB``) counts as
    allocated when nothing names it."""
    figures: list[tuple[str, int, int, int]] = []
    seen: set[str] = set()
    for m in MEM.finditer(text):
        unit = (m.group("suffix") or m.group("unit") or "").lower()
        if unit not in _UNITS:
            # ``print("allocated:", torch.cuda.memory_allocated())``: a whole number of bytes, no unit
            if unit or "." in m.group("num") or len(m.group("num")) < 7:     # digits, not value: shapes are 0s
                continue
            unit = "b"
        slot = _slot(m.group("key"))
        if slot not in seen:
            seen.add(slot)
            figures.append((slot, *m.span("num"), _UNITS[unit]))
    for m in WORDED_MEM.finditer(text):
        slot = _slot(m.group("key"))
        if slot not in seen:
            seen.add(slot)
            figures.append((slot, *m.span("num"), _UNITS[m.group("unit").lower()]))
    if not figures:
        for m in GENERIC_MEM.finditer(text):
            slot = "max_allocated" if m.group("key").lower().startswith("max") else "allocated"
            if slot not in seen:
                seen.add(slot)
                figures.append((slot, *m.span("num"), _UNITS[m.group("unit").lower()]))
    return tuple(figures)
