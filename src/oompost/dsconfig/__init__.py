"""DeepSpeed config checks: DeepSpeed's own validation plus lint for what it
accepts silently or reports only at launch.

Importing this package never imports DeepSpeed; ``validate_with_deepspeed``
and ``check_config`` import it lazily (and work, less thoroughly, without it).
"""

from __future__ import annotations

from .keys import KeyTables, static_tables
from .lint import CHECKS, CheckResult, LintMessage, check_config, lint, load_config
from .validate import ValidationOutcome, deepspeed_version, implied_world_size, validate_with_deepspeed

__all__ = [
    "CHECKS",
    "CheckResult",
    "KeyTables",
    "LintMessage",
    "ValidationOutcome",
    "check_config",
    "deepspeed_version",
    "implied_world_size",
    "lint",
    "load_config",
    "static_tables",
    "validate_with_deepspeed",
]
