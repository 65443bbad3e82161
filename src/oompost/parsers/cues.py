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

    def feed(self, ln: LogLine) -> None:
        text = ln.text
        for name, (sents, pat) in CUES.items():
            if any(s in text for s in sents) and pat.search(text):
                self._counts[name] = self._counts.get(name, 0) + 1
                self._first.setdefault(name, ln)

    def finish(self) -> None:
        for name, n in self._counts.items():
            self.out.fact(f"cue.{name}", n, ref(self.path, self._first[name]))
