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
from .base import SentinelParser, memo_by_text, ref

# name -> (sentinels, pattern)
CUES: dict[str, tuple[tuple[str, ...], re.Pattern[str]]] = {
    # model construction / weight loading
    # (a resume's own words too: "Resuming from checkpoint ckpt.pt", Lightning's "Restoring states from the
    # checkpoint path at ...", accelerate's "Loading states from ...", "Loading checkpoint from ...")
    "model_loading": (("Loading checkpoint", "Loading weights", "loading weights", "Loading model",
                       "load_state_dict", "from_pretrained", "Loading the model", "Resuming from checkpoint",
                       "Restoring states from", "Loading states from", "Exception during initialization"),
                      re.compile(r"Loading checkpoint shards|Loading checkpoint (?:from|at)\b|Loading (?:model )?weights|"
                                 r"Loading model|loading weights|load_state_dict|from_pretrained|Loading the model|"
                                 r"Resuming from checkpoint|Restoring states from|Loading states from|"
                                 # ONNX Runtime creating its session (placing the model's initializers)
                                 r"\[ONNXRuntimeError\].*Exception during initialization")),
    # training progress: tqdm bars, HF Trainer log dicts, "Epoch 3", "step 120"
    "training_progress": (("it/s]", "s/it]", "'loss':", "\"loss\":", "Epoch", "epoch", "iteration", "Iteration",
                           "global_step", "train_loss", "batch", "Batch"),
                          re.compile(r"\d+/\d+ \[[\d:<]+.*(?:it/s|s/it)\]|['\"]loss['\"]:\s*[\d.]|"
                                     r"\b[Ee]poch\s*[:\[]?\s*\d|\b[Ii]teration\s*[:\[]?\s*\d|global_step|"
                                     r"train_loss|\b[Bb]atch(?:es)?\s*[:#\[]?\s*\d+\s*(?:/|of)\s*\d+")),
    # evaluation / validation loops (where retained graphs and metric lists leak)
    # (and the loops' frames: "in validation_step", "in prediction_loop", "in _run_eval")
    "evaluation": (("eval", "Eval", "valid", "Valid", "predict", "test_step"),
                   re.compile(r"\*{3} Running Evaluation|Running evaluation|[Ee]valuat(?:e|ing|ion)\b|"
                              r"[Vv]alidat(?:e|ion|ing)\b|evaluation_loop|prediction_step|predict\(|"
                              r"\b(?:validation|val|eval|test)_(?:step|epoch|loop|batch)\b|prediction_loop|"
                              r"_run_eval\w*|\bdo_eval\b")),
    # inference servers and generation
    # (vLLM's own environment variables, named in its hints: "try setting VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0")
    "serving": (("vllm", "vLLM", "VLLM_", "sglang", "text-generation-inference", "text_generation_server",
                 "text_generation_launcher", "text_generation_router", "text_generation_client",
                 "Unable to warmup", "KV cache",
                 "kv cache", "cache blocks", "max_model_len", "gpu_memory_utilization"),
                re.compile(r"vllm|vLLM|\bVLLM_[A-Z]|sglang|text.generation.(?:inference|server|launcher|router|client)|Unable to warmup|"
                           r"KV cache|kv cache|cache blocks|max_model_len|gpu_memory_utilization")),
    "generation": (("generate", "Generat", "sampling"),
                   re.compile(r"\bgenerate\(|[Gg]enerating|generation_config|\.generate\b|sampling")),
    # a growth story told by the log itself: rising memory figures
    "memory_report": (("memory_allocated", "max_memory", "Memory", "memory:", "mem:", "MiB", "GiB", "MB", "GB"),
                      re.compile(r"(?:memory|mem|Mem|Memory)[ _a-z]*[:=]\s*[\d.]+\s*(?:[MG]i?B)")),
    # several processes sharing one GPU ("Process 1234 has 10.00 GiB memory in use" twice)
    "multi_process": (("Process ",), re.compile(r"Process \d+ has [\d.]+ [KMG]iB memory in use")),
    # inference-only code paths (no backward: no activations kept beyond one layer)
    "no_grad": (("no_grad", "inference_mode"), re.compile(r"no_grad|inference_mode")),
    # model states sharded by FSDP (torchtune's *_distributed recipes, accelerate's FSDP plugin, the wrapper's
    # own frames): per GPU they are 1/N of the model's, like ZeRO-3's
    "fsdp": (("FSDP", "fsdp", "FullyShardedDataParallel", "fully_shard", "finetune_distributed"),
             re.compile(r"\bFSDP\b|\bfsdp\b|/fsdp/|FullyShardedDataParallel|\bfully_shard\b|"
                        r"\b(?:full|lora|qat|knowledge_distillation)_finetune_distributed\b")),
    # an OOM text that comes from a parameter-efficient set-up
    "peft": (("lora", "LoRA", "peft", "trainable params"), re.compile(r"lora|LoRA|peft|trainable params")),
}


# A memory figure printed the same way on many lines ("allocated: 20.4", "| 2417MiB / 12189MiB |",
# "mem=3.2GB"): the first figure of each line, grouped by the line's shape with the numbers taken out.
# ("torch.cuda.memory_allocated(0) 318986240": the device index in parentheses is not the figure)
# (figures may carry thousands separators: "1,234 MiB", as nvidia-smi and many loggers print them)
# (on a line about memory, "current" names the reading too: TensorFlow's get_memory_info() printed as
# "Memory info of GPU /physical_device:GPU:0: current: 0.18, peak: 2.55")
_FIGURE = re.compile(r"(?<![\d,])(?P<v>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*(?P<u>[KMG]i?B|MB|GB|bytes)\b|"
                     r"(?:alloc(?:ated)?|memory|mem|reserved|\bv?ram\b|\brss\b|\bcurrent\b)(?:[^\d|]|\(\d+\)){0,20}"
                     r"(?P<v2>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?![\d.)])", re.I)
_UNIT = {"k": 2**10, "m": 2**20, "g": 2**30}
# a figure of the host's memory, by the words printed beside it ("RAM used", "RSS", "cpu memory", free's "Mem:")
HOST_SERIES = re.compile(r"\bRAM\b|\brss\b|\bRSS\b|[Rr]esident|\b(?:host|cpu|CPU|system|System) ?mem|^Mem:|psutil|"
                         r"virtual_memory|\bswap\b", re.M)
GPU_WORDS = re.compile(r"\b(?:GPU|gpu|cuda|CUDA|VRAM|vram)")
# a table row of memory readings, one per column ("Memory (GiB)  | 8.7      | 12.1  | 13.9  | 15.5"): the label
# before the first bar names memory, every cell after it is a figure
MEM_ROW = re.compile(r"^\s*(?P<label>[^|]*?(?:[Mm]emory|VRAM|vram|\bRAM\b|\bmem\b)[^|]*?)\s*\|(?P<cells>(?:\s*\d+(?:\.\d+)?\s*\|){2,}"
                     r"\s*\d+(?:\.\d+)?\s*)\|?\s*$")
_NUMS = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")


def _row_label_names_memory(text: str) -> bool:
    """What MEM_ROW's label needs before the first "|" (a memory word), as plain substring tests: most lines
    with a "|" (tqdm bars, step lines) fail here without running the pattern."""
    head = text[:text.find("|")]
    return "emory" in head or "VRAM" in head or "vram" in head or "RAM" in head or "mem" in head


# A model's size in its name: "Llama-2-7b-hf", "Qwen2-72B-Instruct", "llama2-7b", "opt-125m", "Qwen2.5-0.5B".
_FAMILIES = (r"llama|qwen|mistral|mixtral|falcon|bloom|opt|gpt|baichuan|chatglm|glm|internlm|yi|deepseek|gemma|"
             r"phi|vicuna|pythia|starcoder|codellama|olmo|mpt|neox|bert|t5|whisper|alpaca|moss|aquila|llava|"
             r"codegen|santacoder|galactica|stablelm|cerebras|dolly|koala|guanaco|wizardlm|orca|zephyr|solar|"
             r"command|dbrx|jamba|granite|minicpm|skywork|xverse|nemotron")
MODEL_NAME = re.compile(rf"(?i)(?<![\w.])(?:[\w.-]*/)?(?:{_FAMILIES})[\w.]*?(?:-[\w.]+?)*?[-_](?P<n>\d+(?:\.\d+)?)"
                        rf"(?P<u>[bBmM])(?![a-zA-Z0-9])")


# Models whose name says a size word, not a count ("gpt2-large", "bert-base-uncased", "openai/whisper-medium"):
# parameter counts from their model cards.  Only the sized names: a bare "gpt2" is also a module path
# (transformers/models/gpt2/modeling_gpt2.py), whatever the size of the model.
NAMED_SIZES = {
    "gpt2-medium": 355e6, "gpt2-large": 774e6, "gpt2-xl": 1558e6,
    "distilbert-base": 66e6, "bert-base": 110e6, "bert-large": 335e6,
    "roberta-base": 125e6, "roberta-large": 355e6, "xlm-roberta-base": 278e6, "xlm-roberta-large": 560e6,
    "deberta-v3-small": 141e6, "deberta-v3-base": 184e6, "deberta-v3-large": 435e6,
    "t5-small": 60e6, "t5-base": 223e6, "t5-large": 738e6, "flan-t5-small": 77e6, "flan-t5-base": 248e6,
    "flan-t5-large": 783e6, "flan-t5-xl": 2.85e9, "flan-t5-xxl": 11.3e9,
    "bart-base": 140e6, "bart-large": 406e6,
    "vit-base": 86e6, "vit-large": 304e6, "vit-huge": 632e6,
    "whisper-tiny": 39e6, "whisper-base": 74e6, "whisper-small": 244e6, "whisper-medium": 769e6,
    "whisper-large": 1550e6,
}
NAMED_MODEL = re.compile(r"(?i)(?<![\w.-])(?:[\w.-]*/)?(" + "|".join(
    re.escape(k) for k in sorted(NAMED_SIZES, key=len, reverse=True)) + r")(?![\w])")


@memo_by_text
def model_params_from_name(text: str) -> int | None:
    m = MODEL_NAME.search(text)
    if m is None:
        k = NAMED_MODEL.search(text) if "-" in text else None
        return int(NAMED_SIZES[k.group(1).lower()]) if k is not None else None
    n = float(m.group("n")) * (1e9 if m.group("u").lower() == "b" else 1e6)
    return int(n) if 1e7 <= n <= 2e12 else None


@memo_by_text
def _figure(text: str) -> tuple[str, float] | None:
    if text.startswith("Mem:"):
        # free's row: total, used, free, shared, buff/cache, available -- what the processes use is "used"
        nums = _NUMS.findall(text)
        if len(nums) >= 3:
            return _NUMS.sub("#", text.strip())[:120], float(nums[1].replace(",", ""))
    m = _FIGURE.search(text)
    if m is None:
        return None
    if m.group("v") is not None:
        v = float(m.group("v").replace(",", "")) * _UNIT.get(m.group("u")[0].lower(), 1)
    else:
        v = float(m.group("v2").replace(",", ""))
    # the shape keeps which device or rank the figure is of ("GPU-1", "memory_allocated(1)", "[rank3]")
    return _NUMS.sub(_shape_num, text.strip())[:120], v


_DEVICE_BEFORE = re.compile(r"(?:GPU[- ]?|cuda:|[Dd]evice[ =:]*|[Rr]ank[ =:\]]*|\()$")


def _shape_num(m: "re.Match[str]") -> str:
    s = m.string
    if "." not in m.group(0) and len(m.group(0)) <= 2 and _DEVICE_BEFORE.search(s, max(0, m.start() - 8), m.start()):
        return m.group(0)
    return "#"


# How far training had got: tqdm's "312/1000 [", "Epoch 3", "step 1200", "iter: 450", "[Iteration 77]".
_PROGRESS = re.compile(r"(?P<bar>\d+)/\d+ \[[\d:]|\b[Ee]poch\s*[:\[]?\s*(?P<epoch>\d+)|"
                       r"\b(?:[Ss]tep|[Ii]ter(?:ation)?|global_step)\s*[:=\[]?\s*(?P<step>\d+)|"
                       # a plain loop's own counter: "batch 280/400", "Batch [12/313]", "batch 5 of 40"
                       r"\b[Bb]atch(?:es)?\s*[:#\[]?\s*(?P<batch>\d+)\s*(?:/|of)\s*\d+")


@memo_by_text
def progress_of(text: str) -> tuple[int, int]:
    """(steps, epochs) a progress line shows; (0, 0) when none."""
    steps = epochs = 0
    for m in _PROGRESS.finditer(text):
        if m.group("epoch") is not None:
            epochs = max(epochs, int(m.group("epoch")))
        else:
            steps = max(steps, int(m.group("bar") or m.group("step") or m.group("batch")))
    return steps, epochs


# An iteration a training loop finished: a tqdm bar counting iterations ("Training:  50%|#####| 4/8 [00:07<00:07,
# 1.8s/it]") whose description is not a loading, download, preprocessing or evaluation bar, or a logged loss
# (the HF Trainer's "{'loss': 2.31, ...}" is printed after optimizer steps).  Stricter than _PROGRESS: a
# shard-loading bar's "2/2 [" or a dataset map's "1000/1000 [" says nothing about training.
_ITER_BAR = re.compile(r"(?P<n>\d+)/\d+ \[[^\]]*?(?:it/s|s/it)\]")
_NOT_TRAINING = re.compile(r"[Ll]oad|[Ss]hard|[Dd]ownload|[Ff]etch|\bMap\b|[Tt]okeni[sz]|[Pp]rocess|[Ee]val|[Vv]alid|"
                           r"[Pp]redict|[Tt]est|[Gg]enerat|[Ii]nfer|[Cc]onvert|[Qq]uanti[sz]|[Cc]alibrat|[Ss]av")
_LOGGED_LOSS = re.compile(r"['\"](?:train_)?loss['\"]:\s*(?:tensor\()?\d")


@memo_by_text
def iterations_done(text: str) -> int:
    """How many training iterations a line says have finished (0: none, or not a training line)."""
    done = 0
    start = 0
    for m in _ITER_BAR.finditer(text):
        desc = text[start:m.start()]
        desc = desc[max(desc.rfind("\r"), desc.rfind("]")) + 1:]
        if not _NOT_TRAINING.search(desc):
            done = max(done, int(m.group("n")))
        start = m.end()
    if not done and _LOGGED_LOSS.search(text) and not _NOT_TRAINING.search(text.split("loss", 1)[0]):
        done = 1
    return done


def growing(values: list[float]) -> bool:
    """At least three readings, mostly non-decreasing, ending ≥ 10 % above where they started."""
    if len(values) < 3 or values[0] <= 0:
        return False
    ups = sum(1 for a, b in zip(values, values[1:]) if b >= a)
    if len(values) >= 5 and ups == len(values) - 1 and values[-1] > 1.01 * values[0]:
        return True                                   # a slow leak: never down, always a little up
    if all(b > a for a, b in zip(values, values[1:])):
        return True                                   # up at every reading (DESIGN: ≥3 consecutive steps)
    return values[-1] >= 1.1 * values[0] and ups >= 0.75 * (len(values) - 1)


# torch.cuda.memory_summary(): "|  CUDA OOMs: 1  |  cudaMalloc retries: 6  |" and the rows'
# "Cur Usage | Peak Usage" columns ("| Allocated memory      |   26377 MB |   26988 MB | ...")
SUMMARY_COUNTS = re.compile(r"CUDA OOMs:\s*(?P<ooms>\d+)\s*\|\s*cudaMalloc retries:\s*(?P<retries>\d+)")
SUMMARY_ROW = re.compile(r"^\s*\|\s*(?P<row>Allocated memory|Active memory|GPU reserved memory|Non-releasable memory)"
                         r"\s*\|\s*(?P<cur>\d+(?:\.\d+)?\s*[KMGT]?i?B)\s*\|\s*(?P<peak>\d+(?:\.\d+)?\s*[KMGT]?i?B)")
SUMMARY_NAMES = {"Allocated memory": "allocated", "Active memory": "active", "GPU reserved memory": "reserved",
                 "Non-releasable memory": "non_releasable"}


# ">>> print(torch.cuda.memory_allocated())" / "In [3]: torch.cuda.memory_reserved(0)" with the answer on the
# next line ("865280", "Out[3]: 865280", "tensor(865280)")
MEMORY_QUERY = re.compile(r"(?:max_)?memory_(?:allocated|reserved|cached)\(\w*\)")
BARE_VALUE = re.compile(r"^\s*(?:Out\[\d+\]:\s*)?(?P<v>\d+(?:\.\d+)?)\s*$")
# A loop that prints its memory as bare numbers, one reading a line (``print(torch.cuda.memory_allocated())``
# -> ``239657472``; ``print(alloc_mib, reserved_mib)`` -> ``450.229 1528.867``): up to four numbers and
# nothing else.  Read as a series by column count; a whole number below BARE_MIN is a line number, a
# counter or an id, not a memory figure (bytes are large; MiB and GiB are printed with decimals).
BARE_LINE_SHAPE = re.compile(rb"[ \t]*0+(?:\.0+)?(?:[ \t,]+0+(?:\.0+)?){0,3}[ \t\r]*")
BARE_LINE = re.compile(r"[ \t]*\d+(?:\.\d+)?(?:[ \t,]+\d+(?:\.\d+)?){0,3}[ \t]*")
BARE_NUMBER = re.compile(r"\d+(?:\.\d+)?")
BARE_MIN = 100_000
BARE_MIN_READINGS = 4
BARE_MIN_GROWTH = 1.2
BARE_LINES_READ = 4096


_ASCII_DIGIT = re.compile(r"[0-9]").search


def has_digit(text: str) -> bool:
    """``any(c.isdigit() for c in text)``, at C speed for ASCII text (most log lines)."""
    if text.isascii():
        return _ASCII_DIGIT(text) is not None
    return any(c.isdigit() for c in text)


def _literal(words: tuple[str, ...]) -> "re.Pattern[str]":
    return re.compile("|".join(re.escape(w) for w in words))


# Whether a cue holds on a line depends only on the line with its ASCII digits turned into 0: no
# sentinel or pattern of CUES holds a digit or a back-reference, so every construct in them (\d,
# [\d.], \w, \b, ".") treats all ASCII digits alike (tests/test_parsers_cues.py checks this).
CUE_SHAPES_SUFFICE = True
_ZERO_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_CUE_TESTS = tuple((name, _literal(sents), pat) for name, (sents, pat) in CUES.items())
_ANY_CUE = _literal(tuple({s for sents, _ in CUES.values() for s in sents}))


def _cues_on(text: str) -> tuple[str, ...]:
    """The cues whose sentinel and pattern both occur in ``text``."""
    if not _ANY_CUE.search(text):
        return ()
    return tuple(name for name, sents, pat in _CUE_TESTS if sents.search(text) and pat.search(text))


class CueParser(SentinelParser):
    SHAPE = BARE_LINE_SHAPE
    SENTINELS: tuple[str, ...] = tuple(sorted({s for sents, _ in CUES.values() for s in sents}
                                              | {"llama", "Llama", "LLaMA", "qwen", "Qwen", "mistral", "Mistral",
                                                 "falcon", "bloom", "opt-", "gpt", "GPT", "baichuan", "Baichuan",
                                                 "chatglm", "ChatGLM", "internlm", "InternLM", "deepseek",
                                                 "DeepSeek", "gemma", "pythia", "vicuna", "Yi-", "phi-", "Phi-",
                                                 "step", "Step", "iter", "Iter", "CUDA OOMs",
                                                 "Allocated memory", "GPU reserved memory", "Non-releasable memory",
                                                 "memory_allocated(", "memory_reserved(", "memory_cached(",
                                                 "allocated", "reserved", "mem", "bytes", "RAM", "RSS", "rss",
                                                 "Memory", "VRAM", "Mem:"}))

    def setup(self) -> None:
        self._counts: dict[str, int] = {}
        self._first: dict[str, LogLine] = {}
        self._series: dict[str, list[float]] = {}
        self._series_ln: dict[str, LogLine] = {}       # a series' first line
        self._series_last: dict[str, LogLine] = {}     # and its last
        self._bare_lines = 0
        self._model: tuple[int, LogLine] | None = None
        self._progress: tuple[int, int, LogLine | None] = (0, 0, None)
        self._iterations: LogLine | None = None       # the first line showing a finished training iteration
        self._pending = dict.fromkeys(CUES)
        self._shape_cues: dict[bytes, tuple[str, ...]] = {}
        self._lines = 0
        self._readings = 0
        self._summary: dict[str, tuple[int, LogLine]] = {}      # memory_summary(): first table's figures
        self._query: str | None = None          # a REPL / print() memory query whose value is on the next line
        self._query_ln: LogLine | None = None
        self.busy = False
        self._narrowed = False

    def _query_answer(self, text: str, ln: LogLine) -> None:
        key, self._query, self.busy = self._query, None, False
        m = BARE_VALUE.match(text)
        if m is not None and key is not None:
            self._series.setdefault(key, []).append(float(m.group("v")))
            self._series_last[key] = ln

    def _bare(self, text: str, ln: LogLine) -> None:
        # a few thousand bare lines say whether a figure rises; a log of nothing but numbers must not be
        # offered line by line to the end (the scanner then skips such lines at C speed again)
        self._bare_lines += 1
        if self._bare_lines >= BARE_LINES_READ:
            self.on_shape_done()
        nums = BARE_NUMBER.findall(text)
        if "." not in nums[0] and float(nums[0]) < BARE_MIN:
            return
        key = f"bare {len(nums)}" if ln.rank is None else f"[{ln.rank}] bare {len(nums)}"
        self._readings += 1
        self._series.setdefault(key, []).append(float(nums[0]))
        self._series_ln.setdefault(key, ln)
        self._series_last[key] = ln

    # Cues are about where a run was: the first sighting of each is what matters, so a long log pays
    # for each pattern only until it is found (and for the memory series only up to a bound).
    MODEL_NAME_LINES = 20_000
    SERIES_READINGS = 20_000
    MAX_SHAPES = 4096               # line shapes whose cues are remembered (a log of unique lines forgets)

    def feed(self, ln: LogLine) -> None:
        text = ln.text
        self._lines += 1
        if self._query is not None:
            self._query_answer(text, ln)
        elif self._readings < self.SERIES_READINGS and BARE_LINE.fullmatch(text):
            self._bare(text, ln)
            return
        if "|" in text and _row_label_names_memory(text) and (row := MEM_ROW.match(text)) is not None:
            key = "row " + _NUMS.sub("#", row.group("label").strip())
            self._series[key] = [float(v) for v in _NUMS.findall(row.group("cells"))]
            self._series_ln.setdefault(key, ln)
            self._series_last[key] = ln
            self._readings += 1
            return
        if "memory_" in text and "(" in text and (mq := MEMORY_QUERY.search(text)) and not has_digit(text[mq.end():]):
            self._query = "? " + _NUMS.sub("#", mq.group(0))
            if self._query_ln is None:
                self._query_ln = ln
            self.busy = True                  # the value comes on the next line, which holds no sentinel
        if "CUDA OOMs" in text or " memory " in text:
            self._memory_summary(text, ln)
        if self._model is None and self._lines <= self.MODEL_NAME_LINES and ("b" in text or "B" in text or "-" in text):
            n = model_params_from_name(text)
            if n is not None:
                self._model = (n, ln)
        if self._readings < self.SERIES_READINGS and (
                "MiB" in text or "MB" in text or "GB" in text or "GiB" in text or "alloc" in text or "reserved" in text
                or "emory" in text or "mem" in text or "bytes" in text or "RAM" in text or "RSS" in text
                or "rss" in text or "Mem:" in text) and "Tried to allocate" not in text and "total capacity" not in text:
            fig = _figure(text)
            if fig is not None:
                self._readings += 1
                # one series per rank: ranks interleave in one file, each with its own baseline
                key = fig[0] if ln.rank is None else f"[{ln.rank}] {fig[0]}"
                vals = self._series.setdefault(key, [])
                vals.append(fig[1])
                self._series_ln.setdefault(key, ln)
                self._series_last[key] = ln
        if self._iterations is None and ("it/s]" in text or "s/it]" in text or "loss" in text) and \
                iterations_done(text):
            self._iterations = ln
        p_steps, p_epochs, _ = self._progress
        if (p_steps < 50 and p_epochs < 2 and ("/" in text or "poch" in text or "tep" in text or "ter" in text)
                and has_digit(text)):
            st, ep = progress_of(text)
            if st > p_steps or ep > p_epochs:
                self._progress = (max(st, p_steps), max(ep, p_epochs), ln)
        pending = self._pending
        found = False
        if pending:
            # which cues hold depends only on the line's shape (CUE_SHAPES_SUFFICE): worked out once per shape
            shape = text.encode("utf-8", "surrogatepass").translate(_ZERO_DIGITS)
            fires = self._shape_cues.get(shape)
            if fires is None:
                fires = _cues_on(text)
                if len(self._shape_cues) >= self.MAX_SHAPES:
                    self._shape_cues.clear()
                self._shape_cues[shape] = fires
            for name in fires:
                if name in pending:
                    self._counts[name] = 1
                    self._first[name] = ln
                    del pending[name]
                    found = True
        if found or not self._narrowed:
            self._maybe_narrow()

    def _maybe_narrow(self) -> None:
        """Once the model name, the memory series and the progress can no longer change (found, or
        past their bounds), only the cues still pending need lines: their sentinels are all it asks for."""
        p_steps, p_epochs, _ = self._progress
        if ((self._model is not None or self._lines > self.MODEL_NAME_LINES)
                and self._readings >= self.SERIES_READINGS and (p_steps >= 50 or p_epochs >= 2)):
            self._narrowed = True
            keep = {s for name in self._pending for s in CUES[name][0]}
            if self._iterations is None:            # a finished training iteration may still come
                keep |= {"it/s]", "s/it]", "'loss':", "\"loss\":", "train_loss"}
            self.narrow(tuple(sorted(keep)))

    def _memory_summary(self, text: str, ln: LogLine) -> None:
        from ..units import parse_size_or_none

        m = SUMMARY_COUNTS.search(text)
        if m:
            for k in ("ooms", "retries"):
                self._summary.setdefault(k, (int(m.group(k)), ln))
            return
        m = SUMMARY_ROW.match(text)
        if m:
            v = parse_size_or_none(m.group("cur").replace(" ", ""))
            if v is not None:
                self._summary.setdefault(SUMMARY_NAMES[m.group("row")], (v, ln))

    def _emit_summary(self) -> None:
        from ..model import OomEvent, OomKind

        for k, (v, ln) in self._summary.items():
            self.out.fact(f"memory_summary.{k}", v, ref(self.path, ln))
        ooms = self._summary.get("ooms")
        if ooms is None or ooms[0] < 1 or any(o.ref.source == self.path for o in self.out.ooms):
            return
        # the process's own count of CUDA OOMs: an OOM happened, with the allocator's state beside it
        alloc = self._summary.get("allocated", (None,))[0]
        res = self._summary.get("reserved", (None,))[0]
        self.out.ooms.append(OomEvent(
            OomKind.OTHER, ref(self.path, ooms[1]), rank=self.rank_hint, allocated_bytes=alloc, reserved_bytes=res,
            reserved_unallocated_bytes=res - alloc if res is not None and alloc is not None and res >= alloc else None,
            message_format="memory_summary", truncated=True))

    def finish(self) -> None:
        if self._summary:
            self._emit_summary()
        for name, n in self._counts.items():
            self.out.fact(f"cue.{name}", n, ref(self.path, self._first[name]))
        if self._model is not None:
            self.out.fact("model.params_from_name", self._model[0], ref(self.path, self._model[1]))
        if self._iterations is not None:
            self.out.fact("cue.iterations_done", iterations_done(self._iterations.text),
                          ref(self.path, self._iterations))
        steps, epochs, pln = self._progress
        if pln is not None and (steps >= 50 or epochs >= 2):
            self.out.fact("cue.long_run", max(steps, epochs), ref(self.path, pln))
        for shape, vals in self._series.items():
            if "bare " in shape:
                # numbers with no word beside them: a longer run, and a clear rise, before they count
                if len(vals) >= BARE_MIN_READINGS and growing(vals) and vals[-1] >= BARE_MIN_GROWTH * vals[0]:
                    self._grew(shape, vals)
                    break
                continue
            if growing(vals) or (len(vals) == 2 and "MiB / #MiB" in shape and vals[1] >= 1.5 * vals[0] > 0) or (
                    shape.startswith("? ") and len(vals) >= 2 and all(b > a for a, b in zip(vals, vals[1:]))):
                self._grew(shape, vals)
                break

    def _grew(self, shape: str, vals: list[float]) -> None:
        """``cue.memory_growing`` (how many readings, at the series' first line) and
        ``cue.memory_growing_range`` (its first and last figure as printed, at its last line); a series of the
        host's memory (RAM, RSS, ``free``'s "Mem:" row) is ``cue.host_memory_growing`` instead: host RAM that
        runs out is host_oom (DESIGN.md), whatever grew in it."""
        first = self._series_ln.get(shape) or self._query_ln
        if first is None:
            return
        name = "cue.host_memory_growing" if HOST_SERIES.search(shape) and not GPU_WORDS.search(shape) \
            else "cue.memory_growing"
        self.out.fact(name, len(vals), ref(self.path, first))
        last = self._series_last.get(shape, first)
        self.out.fact(name + "_range", (vals[0], vals[-1]), ref(self.path, last))
