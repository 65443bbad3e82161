"""NCCL001 — a distributed failure with no memory failure on any rank.

**Cause**  A collective timed out (one rank never joined: a hang, a slow
checkpoint save, a data-loader stall, a deadlock), a peer exited, the network
failed, or NVLS/Fabric Manager is misconfigured.  Later ranks' timeouts and
"remote process exited" errors are consequences of the first failing rank.

JAX's coordination service timing out at multi-host start-up (a task that never
registered or never reached a barrier) is the same failure in another stack.
NCCL's ``shm_open`` refused with "Permission denied" is a set-up failure of its
shared-memory transport (``/dev/shm`` permissions), not a full ``/dev/shm``.
torchrun's rendezvous failing (``RendezvousClosedError``, ``RendezvousConnectionError``,
``RendezvousTimeoutError``) means the nodes never formed, or no longer form, one
job: a node that never joined, a port another job holds, an endpoint a node
cannot reach, or another node's agent that closed it after its own workers died.

**Fix**  Look at the first failing rank (the laggard: lowest "last enqueued
work").  Enable the flight recorder (``TORCH_NCCL_TRACE_BUFFER_SIZE=2000``,
``TORCH_NCCL_DUMP_ON_TIMEOUT=1``) to see the collective each rank was in;
raise the timeout only for known long operations.  Memory settings are
irrelevant here.
"""

from __future__ import annotations

from ...analysis.context import Context
from ...model import FailureKind
from ..base import Cause, Finding, Fix, NotAFix, confidence

_DIST = (FailureKind.NCCL_TIMEOUT, FailureKind.NCCL_REMOTE, FailureKind.NCCL_SYSTEM, FailureKind.NCCL_INTERNAL,
         FailureKind.NCCL_HEARTBEAT, FailureKind.NCCL_OTHER, FailureKind.NCCL_INVALID_USAGE,
         getattr(FailureKind, "NCCL_NVLS", FailureKind.NCCL_OTHER))


_COORDINATION = "DEADLINE_EXCEEDED"


class NcclError:
    code = "NCCL001"
    cause = Cause.NCCL_ERROR

    def evaluate(self, ctx: Context) -> list[Finding]:
        fails = [f for f in ctx.failures_of(*_DIST) if "Duplicate GPU" not in (f.last_error or f.message)]
        if not fails or ctx.has_memory_failure:
            return []
        if ctx.first_rank is not None:
            mine = [f for f in fails if f.rank in (ctx.first_rank, None)]
            fails = mine or fails
        f = fails[0]
        kind = f.kind
        sub = {FailureKind.NCCL_TIMEOUT: "timeout", FailureKind.NCCL_HEARTBEAT: "watchdog_hang",
               FailureKind.NCCL_REMOTE: "peer_exited"}.get(kind, kind.value.removeprefix("nccl_"))
        signals = [("a distributed failure", 0.6), ("no OOM or memory failure on any rank", 0.25)]
        numbers = []
        fixes = [Fix("env", "TORCH_NCCL_TRACE_BUFFER_SIZE", "2000",
                     "record the last collectives of every rank (flight recorder)"),
                 Fix("env", "TORCH_NCCL_DUMP_ON_TIMEOUT", "1", "dump them on timeout; analyse with torchfrtrace")]
        title = "A distributed collective failed"
        if kind is FailureKind.NCCL_TIMEOUT and (_COORDINATION in f.message or "cluster registration" in f.message):
            # JAX / XLA's coordination service: a task never registered or never reached a barrier
            sub, title = "coordination_timeout", "The multi-host start-up (JAX coordination service) timed out"
            fixes = [Fix("code", "every task started and reached the coordinator",
                         "num_processes matches the processes launched; each can reach coordinator_address:port",
                         "the tasks the barrier names as timed out never connected (not launched, crashed earlier, "
                         "or a firewall on the coordinator's port)"),
                     Fix("code", "the first task's own log", "read the timed-out tasks' logs before this one's",
                         "this task only waited; the cause is in a task that did not arrive")]
        elif kind is FailureKind.NCCL_TIMEOUT:
            title = f"NCCL collective timeout ({f.op_type or 'collective'}" + (
                f", SeqNum {f.seq_num})" if f.seq_num is not None else ")")
            if f.timeout_ms:
                numbers.append(("timeout", f"{f.timeout_ms / 1000:.0f} s"))
            ws = ctx.evidence.facts_named("nccl.work_status")
            for w in ws[:4]:
                v = w.value if isinstance(w.value, dict) else {}
                numbers.append((f"rank {v.get('rank')} last enqueued / completed",
                                f"{v.get('last_enqueued')} / {v.get('last_completed')}"))
            fixes.insert(0, Fix("code", "find the rank that did not reach the collective",
                                "compare 'last enqueued work' across ranks; the lowest is the laggard",
                                "a timeout on every rank means one rank is stuck elsewhere (data, a hang, a slow "
                                "save)"))
        elif "HCCL" in f.message or "Hccl" in f.message:
            # Huawei Ascend's collective library: NCCL's flight recorder and env do not apply
            sub, title = "hccl", "Ascend's HCCL collective library failed"
            fixes = [Fix("code", "leftover processes on the NPUs", "npu-smi info; stop the previous job's processes, "
                         "wait a few seconds and relaunch", "HCCL cannot set up a device that an earlier (or a "
                         "second) process still holds"),
                     Fix("env", "ASCEND_GLOBAL_LOG_LEVEL", "1",
                         "the device logs (plog) name the HCCL error code and the rank that failed first"),
                     Fix("env", "HCCL_CONNECT_TIMEOUT", "1200",
                         "seconds the ranks may take to link up at start-up (a slow or loaded cluster)")]
        elif "shared-memory segment" in f.message or "shared-memory transport refused" in f.message:
            # shm_open refused (permissions on /dev/shm, a container's mount): the transport, not the memory
            sub, title = "shm_refused", "NCCL could not open its shared-memory segment"
            fixes = [Fix("code", "/dev/shm permissions", "mount it world-writable (1777), or docker run --ipc=host",
                         "NCCL's intra-node SHM transport creates its segments there; shm_open was refused"),
                     Fix("env", "NCCL_SHM_DISABLE", "1",
                         "fall back to P2P / sockets between local ranks if /dev/shm cannot be fixed")]
        elif "Rendezvous" in f.message or "Rendezvous" in (f.exception or "") or "rendezvous" in f.message:
            sub, title = "rendezvous", "torchrun's rendezvous failed: the nodes did not form one job"
            fixes = [Fix("code", "the same rendezvous on every node",
                         "--nnodes, --rdzv_id and --rdzv_endpoint (or --master_addr/--master_port) identical on all "
                         "nodes, and every node launched", "a node that never joins times the rendezvous out; "
                         "a second job on the same endpoint joins or closes it"),
                     Fix("code", "a free, reachable rendezvous port", "pick an unused --master_port / endpoint port "
                         "that every node can reach", "'Address already in use' means another job holds the port; "
                         "connection errors mean a firewall or a wrong address"),
                     Fix("code", "the first failing node's own log", "read it before this one's",
                         "a closed rendezvous is another node's agent giving up after its workers failed")]
        elif sub == "nvls":
            fixes.insert(0, Fix("env", "NCCL_NVLS_ENABLE", "0", "NVLink SHARP resources could not be bound"))
        elif kind is FailureKind.NCCL_REMOTE:
            fixes.insert(0, Fix("code", "read the peer's log", "the host named in 'Connection closed by remote peer'",
                                "a remote error is the victim's view of another rank's death"))
        cited = (f.ref,) if f.last_error_ref is None or f.last_error_ref == f.ref else (f.ref, f.last_error_ref)
        why = f" NCCL's last warning before it: {f.last_error[:300]}" if f.last_error else ""
        return [Finding(
            self.code, self.cause, title, confidence(signals), evidence=cited, fixes=tuple(fixes),
            not_fixes=(NotAFix("memory settings", "no rank ran out of memory"),
                       *((NotAFix("NCCL_P2P_DISABLE=1", "changes the transport, not a stuck rank"),)
                         if sub not in ("shm_refused", "rendezvous") else ())),
            signals=tuple(signals), numbers=tuple(numbers),
            detail=f"{f.message[:300] or title}.{why} No rank reports an out-of-memory error, so this is a "
                   "distributed failure, not a memory one.", sub_cause=sub)]
