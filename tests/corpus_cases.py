"""The real-world corpus (tests/corpus/): loading cases, folds, and scoring.

Shared by the corpus tests and ``benchmarks/accuracy.py``.  A case is a
directory of verbatim artifacts from one public issue thread plus
``case.json`` (URL, label, status, ...): see tests/corpus/README.md.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parent / "corpus"
SAMPLES = Path(__file__).parent.parent / "sample_logs"
CAUSES = ("config_error", "host_oom", "nccl_error", "capacity", "leak", "comm_buffer", "fragmentation",
          "activation_spike", "unknown")
FRAMEWORKS = ("deepspeed", "fsdp", "megatron", "hf_trainer", "accelerate", "llama_factory", "axolotl", "torchtune",
              "trl", "lightning", "vllm", "sglang", "tgi", "diffusers", "pytorch", "other")
REQUIRED = ("url", "repository", "title", "label", "sub_cause", "status", "fix", "gpu", "framework", "torch",
            "reasoning", "files")


def fold_of(url: str) -> str:
    """``dev`` (70 %) or ``test`` (30 %), fixed forever by the thread's URL."""
    h = int(hashlib.sha256(url.strip().encode()).hexdigest()[:8], 16)
    return "dev" if h % 100 < 70 else "test"


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    meta: dict

    @property
    def label(self) -> str:
        return self.meta["label"]

    @property
    def fold(self) -> str:
        return fold_of(self.meta["url"])

    @property
    def files(self) -> list[str]:
        return [str(self.path / f) for f in self.meta["files"]]

    @property
    def repository(self) -> str:
        return self.meta["repository"]


def load_cases(fold: str | None = None, root: Path = ROOT) -> list[Case]:
    """Every case under ``root`` (optionally one fold), sorted by name."""
    out = []
    if not root.is_dir():
        return out
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        f = d / "case.json"
        if not f.is_file():
            continue
        meta = json.loads(f.read_text(encoding="utf-8"))
        c = Case(d.name, d, meta)
        if fold is None or c.fold == fold:
            out.append(c)
    return out


def sample_cases() -> list[Case]:
    """The bundled captures, as cases (their expected.json is the label)."""
    out = []
    for d in sorted(p for p in SAMPLES.iterdir() if (p / "expected.json").is_file()):
        exp = json.loads((d / "expected.json").read_text())
        meta = {"url": f"sample_logs/{d.name}", "repository": "oompost/sample_logs", "label": exp["cause"],
                "files": ["."]}
        out.append(Case(d.name, d, meta))
    return out
