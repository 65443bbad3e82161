"""The phase of a failing allocation from the frames other people's tracebacks quote."""

from __future__ import annotations

from pathlib import Path

from oompost.analysis.context import build_context
from oompost.analysis.phase import Phase, classify_frames
from oompost.model import Frame
from oompost.parsers import parse_paths

CORPUS = Path(__file__).parent / "corpus"


def test_adams_update_line_is_the_optimizer_step():
    # apex's FusedAdam creating its first moment inside DeepSpeed's initialize_optimizer_states
    # (tests/corpus/deepspeedai__DeepSpeed__237, https://github.com/deepspeedai/DeepSpeed/issues/237)
    fused = Frame("/opt/conda/envs/python3.6/lib/python3.6/site-packages/apex/optimizers/fused_adam.py", 129, "step",
                  "state['exp_avg'] = torch.zeros_like(p.data)")
    assert classify_frames((fused,), innermost_first=True).phase is Phase.OPTIMIZER_STEP
    ctx = build_context(parse_paths([str(CORPUS / "deepspeedai__DeepSpeed__237" / "log.txt")]))
    assert ctx.phase.phase is Phase.OPTIMIZER_STEP
    # an attention layer that merely names an average is not Adam
    avg = Frame("model.py", 10, "forward", "exp_avgpool = self.pool(x)")
    assert classify_frames((avg,), innermost_first=True).phase is not Phase.OPTIMIZER_STEP
