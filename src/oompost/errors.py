"""Exceptions, each carrying the exit code the CLI maps it to (DESIGN.md)."""

from __future__ import annotations


class OompostError(Exception):
    """Base class; exit code 1 (internal error) unless a subclass says otherwise."""

    exit_code = 1


class InputError(OompostError):
    """Unusable input: missing file, binary junk, corrupt or hostile pickle (exit 3)."""

    exit_code = 3


class SnapshotError(InputError):
    """A snapshot pickle that cannot be read safely."""


class HostilePickleError(SnapshotError):
    """A pickle that tries to import a global: refused, never executed."""


class MissingDependencyError(OompostError):
    """An optional dependency (torch, deepspeed) is needed for this command."""

    exit_code = 3
