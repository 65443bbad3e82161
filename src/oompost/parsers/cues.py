"""Where a run was when it failed, from the lines people's logs always carry.

Other people's logs rarely have our step lines or a config dump, but they
have a progress bar, "Loading checkpoint shards", an evaluation banner, a
vLLM start-up line.  Each cue is recorded once per file as a fact
``cue.<name>`` with its first line, so the verdict can weigh "the OOM came
while the model was loading" against "after 300 training iterations".
"""

from __future__ import annotations

import re

from ..sources import LogLine
from .base import EvidenceBuilder, TracebackTracker, ref

# name -> (sentinels, pattern)
CUES: dict[str, tuple[tuple[str, ...], re.Pattern[str]]] = {
    # model construction / weight loading
    "model_loading": (("Loading checkpoint shards", "Loading weights", "loading weights", "Loading model",
                       "load_state_dict", "from_pretrained", "Loading the model"),
                      re.compile(r"Loading checkpoint shards|Loading (?:model )?weights|Loading model|"
                                 r"loading weights|load_state_dict|from_pretrained|Loading the model")),
    # training progress: tqdm bars, HF Trainer log dicts, "Epoch 3", "step 120"
    "training_progress": (("it/s]", "s/it]", "'loss':", "\"loss\":", "Epoch", "epoch", "iteration", "Iteration",
                           "global_step", "train_loss"),
                          re.compile(r"\d+/\d+ \[[\d:<]+.*(?:it/s|s/it)\]|['\"]loss['\"]:\s*[\d.]|"
                                     r"\b[Ee]poch\s*[:\[]?\s*\d|\b[Ii]teration\s*[:\[]?\s*\d|global_step|"
                                     r"train_loss")),
    # evaluation / validation loops (where retained graphs and metric lists leak)
    "evaluation": (("eval", "Eval", "valid", "Valid", "predict"),
                   re.compile(r"\*{3} Running Evaluation|Running evaluation|[Ee]valuat(?:e|ing|ion)\b|"
                              r"[Vv]alidat(?:e|ion|ing)\b|evaluation_loop|prediction_step|predict\(")),
    # inference servers and generation
    "serving": (("vllm", "vLLM", "sglang", "text-generation-inference", "text_generation_server", "KV cache",
                 "kv cache", "cache blocks", "max_model_len", "gpu_memory_utilization"),
                re.compile(r"vllm|vLLM|sglang|text.generation.(?:inference|server)|KV cache|kv cache|cache blocks|"
                           r"max_model_len|gpu_memory_utilization")),
    "generation": (("generate", "Generat", "sampling"),
                   re.compile(r"\bgenerate\(|[Gg]enerating|generation_config|\.generate\b|sampling")),
    # a growth story told by the log itself: rising memory figures
    "memory_report": (("memory_allocated", "max_memory", "Memory", "memory:", "mem:", "MiB", "GiB", "MB", "GB"),
                      re.compile(r"(?:memory|mem|Mem|Memory)[ _a-z]*[:=]\s*[\d.]+\s*(?:[MG]i?B)")),
    # several processes sharing one GPU ("Process 1234 has 10.00 GiB memory in use" twice)
    "multi_process": (("Process ",), re.compile(r"Process \d+ has [\d.]+ [KMG]iB memory in use")),
    # inference-only code paths (no backward: no activations kept beyond one layer)
    "no_grad": (("no_grad", "inference_mode"), re.compile(r"no_grad|inference_mode")),
    # an OOM text that comes from a parameter-efficient set-up
    "peft": (("lora", "LoRA", "peft", "trainable params"), re.compile(r"lora|LoRA|peft|trainable params")),
}


# A memory figure printed the same way on many lines ("allocated: 20.4", "| 2417MiB / 12189MiB |",
# "mem=3.2GB"): the first figure of each line, grouped by the line's shape with the numbers taken out.
_FIGURE = re.compile(r"(?P<v>\d+(?:\.\d+)?)\s*(?P<u>[KMG]i?B|MB|GB)\b|(?:allocated|memory|mem|reserved)[^\d|]{0,20}"
                     r"(?P<v2>\d+(?:\.\d+)?)", re.I)
_UNIT = {"k": 2**10, "m": 2**20, "g": 2**30}
_NUMS = re.compile(r"\d+(?:\.\d+)?")


def _figure(text: str) -> tuple[str, float] | None:
    m = _FIGURE.search(text)
    if m is None:
        return None
    if m.group("v") is not None:
        v = float(m.group("v")) * _UNIT.get(m.group("u")[0].lower(), 1)
    else:
        v = float(m.group("v2"))
    return _NUMS.sub("#", text.strip())[:120], v


def growing(values: list[float]) -> bool:
    """At least three readings, mostly non-decreasing, ending ≥ 10 % above where they started."""
    if len(values) < 3 or values[0] <= 0:
        return False
    ups = sum(1 for a, b in zip(values, values[1:]) if b >= a)
    if len(values) >= 5 and ups == len(values) - 1 and values[-1] > 1.01 * values[0]:
        return True                                   # a slow leak: never down, always a little up
    return values[-1] >= 1.1 * values[0] and ups >= 0.75 * (len(values) - 1)


class CueParser:
    SENTINELS: tuple[str, ...] = tuple(sorted({s for sents, _ in CUES.values() for s in sents}))
    TRIGGER = re.compile("|".join(re.escape(s) for s in SENTINELS))

    busy = False

    def __init__(self, path: str, out: EvidenceBuilder, *, rank_hint: int | None = None,
                 tracebacks: TracebackTracker | None = None) -> None:
        self.path = path
        self.out = out
        self._counts: dict[str, int] = {}
        self._first: dict[str, LogLine] = {}
        self._series: dict[str, list[float]] = {}
        self._series_ln: dict[str, LogLine] = {}

    def feed(self, ln: LogLine) -> None:
        text = ln.text
        if ("MiB" in text or "MB" in text or "GB" in text or "GiB" in text or "allocated" in text
                or "emory" in text) and "Tried to allocate" not in text and "total capacity" not in text:
            fig = _figure(text)
            if fig is not None:
                vals = self._series.setdefault(fig[0], [])
                if len(vals) < 10_000:
                    vals.append(fig[1])
                    self._series_ln.setdefault(fig[0], ln)
        for name, (sents, pat) in CUES.items():
            if any(s in text for s in sents) and pat.search(text):
                self._counts[name] = self._counts.get(name, 0) + 1
                self._first.setdefault(name, ln)

    def finish(self) -> None:
        for name, n in self._counts.items():
            self.out.fact(f"cue.{name}", n, ref(self.path, self._first[name]))
        for shape, vals in self._series.items():
            if growing(vals) or (len(vals) == 2 and "MiB / #MiB" in shape and vals[1] >= 1.5 * vals[0] > 0):
                self.out.fact("cue.memory_growing", len(vals), ref(self.path, self._series_ln[shape]))
                break
