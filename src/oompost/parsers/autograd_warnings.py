"""PyTorch's warning that a tensor with a graph was turned into a number, read for what it says of a loss.

``float(val_loss)`` on a loss summed as a tensor (``val_loss += criterion(model(x), y)`` outside
``torch.no_grad()``) warns "Converting a tensor with requires_grad=True to a scalar may lead to unexpected
behavior", and Python quotes the source line under it.  When that line names an accumulated loss (a validation,
evaluation, running, total or epoch loss), the sum still holds a graph, and with it every summed step's saved
activations: memory kept from step to step, said by PyTorch itself.  A training loss printed after its backward
(``float(loss)``) warns too, and holds nothing: it names no accumulator and is not recorded.
"""

from __future__ import annotations

import re

from .base import EvidenceBuilder, TracebackTracker, ref
from ..sources import LogLine

WARNING = "requires_grad=True to a scalar"
# the names a summed loss goes by: val_loss, eval_loss, running_loss, total_loss, epoch_loss, val_total, losses
ACCUMULATOR = re.compile(r"\b(?P<v>(?:val|valid|validation|eval|evaluation|test|running|total|epoch|sum|avg|mean|"
                         r"cum|accum)_?(?:loss(?:es)?|total|sum)|losses)\b", re.IGNORECASE)
_LOOKAHEAD = 2                                 # the "Consider using tensor.detach()" line, then the source line


class AutogradWarningParser:
    SENTINELS: tuple[str, ...] = (WARNING,)
    TRIGGER = re.compile(re.escape(WARNING))

    def __init__(self, path: str, out: EvidenceBuilder, *, rank_hint: int | None = None,
                 tracebacks: TracebackTracker | None = None) -> None:
        self.path = path
        self.out = out
        self._warning: LogLine | None = None
        self._left = 0
        self._found = False

    @property
    def busy(self) -> bool:
        return self._left > 0                  # the quoted source line holds no sentinel: offer the next lines

    def feed(self, ln: LogLine) -> None:
        if WARNING in ln.text:
            self._warning, self._left = ln, _LOOKAHEAD
            return
        if self._left <= 0 or self._warning is None:
            return
        self._left -= 1
        if ln.text.lstrip().startswith("Consider using"):
            return
        self._left = 0
        if not ln.text[:1].isspace():
            return                             # not the quoted source line (Python indents it)
        m = ACCUMULATOR.search(ln.text)
        if m is not None and not self._found:
            self._found = True
            self.out.fact("cue.graph_kept", m.group("v"), ref(self.path, ln))

    def finish(self) -> None:
        pass
