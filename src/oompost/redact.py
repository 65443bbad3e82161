"""--redact: scrub hostnames, IP addresses, user names and secrets from a Report.

Reports go into tickets; the logs they quote carry cluster hostnames (NCCL's
``host:pid:tid`` prefix, torchrun's ``host : name`` field), addresses, home
directories and, now and then, a token pasted into a command line.  Each is
replaced by a placeholder that is stable within the report (the same host is
``<host-1>`` everywhere), so the evidence still reads coherently.

Two passes: the first learns hostnames from the places that name them, the
second rewrites every string of the Report (finding texts, SourceRef lines,
paths, configs, facts), hostnames wherever they appear.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .report import Report

# ---------------------------------------------------------------- patterns

_HOST = r"[A-Za-z][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*"

# Places that say "this word is a host".
_HOST_SOURCES: tuple[re.Pattern[str], ...] = (
    # NCCL: "ng30903:3063028:3066152 [3] NCCL WARN ..."
    re.compile(rf"(?<![\w.<-])({_HOST}):\d+:\d+ \[\d+\]"),
    # torchrun ChildFailedError: "  host      : node-17.cluster.local"
    re.compile(rf"\bhost(?:name)?\s*[:=]\s*({_HOST})"),
    # "Connection closed by remote peer gpu-node-3<51234>", "on host X", "node X" in Slurm lines
    re.compile(rf"\bremote peer\s+({_HOST})"),
    re.compile(rf"\bon host\s+({_HOST})"),
    re.compile(rf"\bsrun: error:\s+({_HOST}):"),
    re.compile(rf"\bMASTER_ADDR\s*[=:]\s*({_HOST})"),
    re.compile(rf"\bNodeList=({_HOST})"),
)
_NOT_HOSTS = {"localhost", "n/a", "na", "none", "null", "unknown", "host", "rank", "local"}

_IPV4 = re.compile(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?!\d|\.\d)")
_H4 = r"[0-9A-Fa-f]{1,4}"
_IPV6 = re.compile(
    rf"(?<![\w.])(?:"
    rf"(?:{_H4}:){{7}}{_H4}"                              # full form
    rf"|(?:{_H4}:){{1,7}}:(?:{_H4}(?::{_H4}){{0,6}})?"     # a::, a::b, a:b::c:d
    rf"|::(?:{_H4}(?::{_H4}){{0,6}})"                     # ::1, ::ffff:...
    rf")(?:%[\w.]+)?(?![\w:]|\.\d)"
)

_USER_PATHS: tuple[re.Pattern[str], ...] = (
    re.compile(r"(/home/|/Users/)(?!<user>)([^/\s:'\"]+)"),
    re.compile(r"(?i)(?<![\w])([A-Z]:\\Users\\)(?!<user>)([^\\\s:'\"]+)"),
    re.compile(r"(?i)(?<![\w])([A-Z]:/Users/)(?!<user>)([^/\s:'\"]+)"),
    re.compile(r"\b((?:USER|LOGNAME|USERNAME)=)(?!<user>)([\w.-]+)"),
)

_TOKENS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=-]{8,}"), "Bearer <token>"),
    # key=value / key: value where the key names a secret (keep the key)
    (re.compile(r"(?i)(\b[\w.-]*(?:api[_-]?key|access[_-]?key|secret(?:[_-]?key)?|token|passw(?:or)?d|auth)"
                r"[\"']?\s*[=:]\s*[\"']?)(?!<token>)([A-Za-z0-9_\-./+=~]{6,})"), r"\1<token>"),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"), "<token>"),
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})\b"), "<token>"),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "<token>"),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"), "<token>"),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b"), "<token>"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), "<token>"),
    (re.compile(r"(?<![\w])[0-9a-fA-F]{32,}(?![\w])"), "<token>"),
)
# Long base64-ish runs: must mix cases and digits so paths and identifiers survive.
_B64 = re.compile(r"(?<![\w/+=.-])[A-Za-z0-9+/_-]{40,}={0,2}(?![\w/+=])")


_WORDY = re.compile(r"[a-z]{7}|[A-Z]{7}")


def _looks_secret(s: str) -> bool:
    """Random-looking: digits and both cases, few separators, no long letter runs
    (which C++ mangled names and identifiers have)."""
    return (any(c.isdigit() for c in s) and any(c.isupper() for c in s) and any(c.islower() for c in s)
            and s.count("/") <= 2 and s.count("_") <= 3 and not _WORDY.search(s))


# File names that say nothing about who ran what: kept so the report still reads.
_GENERIC_FILE = re.compile(r"(?i)^(?:run|train|stdout|stderr|output|log|rank[_-]?\d+|node[_-]?\d+|worker[_-]?\d+|"
                           r"ds_config|deepspeed_config|config|snapshot(?:[_-][\w]*)?|capture|expected|"
                           r"launcher|torchrun|slurm[-_]?\d*|job|report)(?:\.[\w.]+)?$")


class Redactor:
    """Stable placeholders for one report."""

    def __init__(self) -> None:
        self.hosts: dict[str, str] = {}
        self.ips: dict[str, str] = {}
        self.paths: dict[str, str] = {}          # a directory or specific file name → its placeholder
        self._host_re: re.Pattern[str] | None = None
        self._path_re: re.Pattern[str] | None = None

    def learn_path(self, path: str) -> None:
        """The directories an input sits in and a file name that is not generic are
        replaced wherever they appear (job directories often carry user or project names)."""
        import os.path

        d, base = os.path.split(path.rstrip("/"))
        if d and d not in (".", "/") and d not in self.paths:
            self.paths[d] = f"<dir-{sum(v.startswith('<dir') for v in self.paths.values()) + 1}>"
        if base and not _GENERIC_FILE.match(base) and base not in self.paths:
            ext = "".join(re.findall(r"\.(?:log|txt|out|err|json|pickle|pkl|gz)$", base)) or (
                "".join(os.path.splitext(base)[1:]))
            self.paths[base] = f"<file-{sum(v.startswith('<file') for v in self.paths.values()) + 1}>{ext}"
        self._path_re = None

    def _paths(self) -> re.Pattern[str] | None:
        if self._path_re is None and self.paths:
            names = sorted(self.paths, key=len, reverse=True)
            self._path_re = re.compile(r"(?<![\w.-])(" + "|".join(re.escape(n) for n in names) + r")(?![\w-])")
        return self._path_re

    # pass 1
    def learn(self, text: str) -> None:
        for pat in _HOST_SOURCES:
            for m in pat.finditer(text):
                name = m.group(1).rstrip(".-")
                if len(name) < 2 or name.lower() in _NOT_HOSTS or name.startswith("<"):
                    continue
                if name not in self.hosts:
                    self.hosts[name] = f"<host-{len(self.hosts) + 1}>"
                    self._host_re = None

    # pass 2
    def _ip(self, m: re.Match[str]) -> str:
        addr = m.group(0)
        if addr in ("0.0.0.0", "127.0.0.1", "::1", "::"):
            return addr
        if addr not in self.ips:
            self.ips[addr] = f"<ip-{len(self.ips) + 1}>"
        return self.ips[addr]

    def _hosts(self) -> re.Pattern[str] | None:
        if self._host_re is None and self.hosts:
            names = sorted(self.hosts, key=len, reverse=True)
            self._host_re = re.compile(r"(?<![\w.-])(" + "|".join(re.escape(n) for n in names) + r")(?![\w])")
        return self._host_re

    def text(self, s: str) -> str:
        if not s:
            return s
        for pat, repl in _TOKENS:
            s = pat.sub(repl, s)
        s = _B64.sub(lambda m: "<token>" if _looks_secret(m.group(0)) else m.group(0), s)
        s = _IPV6.sub(self._ip, s)
        s = _IPV4.sub(self._ip, s)
        for pat in _USER_PATHS:
            s = pat.sub(r"\1<user>", s)
        pre = self._paths()
        if pre is not None:
            s = pre.sub(lambda m: self.paths[m.group(1)], s)
        hre = self._hosts()
        if hre is not None:
            s = hre.sub(lambda m: self.hosts[m.group(1)], s)
        return s


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, Enum):
        return
    if isinstance(obj, str):
        yield obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _strings(getattr(obj, f.name))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for v in obj:
            yield from _strings(v)


def _rewrite(obj: Any, r: Redactor) -> Any:
    if isinstance(obj, Enum):           # Cause and InputKind are str enums: keep them as they are
        return obj
    if isinstance(obj, str):
        return r.text(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {}
        for f in dataclasses.fields(obj):
            old = getattr(obj, f.name)
            new = _rewrite(old, r)
            if new is not old:
                changes[f.name] = new
        return dataclasses.replace(obj, **changes) if changes else obj
    if isinstance(obj, dict):
        return {_rewrite(k, r): _rewrite(v, r) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(_rewrite(v, r) for v in obj)
    if isinstance(obj, list):
        return [_rewrite(v, r) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return type(obj)(_rewrite(v, r) for v in obj)
    return obj


def job_alias(name: str) -> str:
    """A scanned job's name under ``--redact``: job directories carry user and project
    names, so the index, the history and the report paths show a stable digest instead
    (the same job gets the same alias every night, so trends and incremental scans hold)."""
    import hashlib

    return "job-" + hashlib.blake2b(name.encode("utf-8", "surrogateescape"), digest_size=5).hexdigest()


def redact_job_text(text: str, paths: "Iterable[str]") -> str:
    """``text`` about one job (an error message) with the job's directories and file
    names replaced, as in its report."""
    if not text:
        return text
    r = Redactor()
    for p in paths:
        r.learn_path(p)
    r.learn(text)
    return r.text(text)


def redact_text(text: str) -> str:
    """One string on its own (hosts learned from it alone); ``None``/"" pass through."""
    if not text:
        return text
    r = Redactor()
    r.learn(text)
    return r.text(text)


def redact_report(report: "Report") -> "Report":
    """A copy of ``report`` with every string scrubbed and ``redacted=True``."""
    r = Redactor()
    for s in _strings(report):
        r.learn(s)
    for i in report.inputs:
        r.learn_path(i.path)
    out = _rewrite(report, r)
    return dataclasses.replace(out, redacted=True)
