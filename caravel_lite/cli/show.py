"""``caravel-lite show JOB_ID``: one job of any tenant: its envelope and failure
history (each failed attempt's time, attempt, category, exception type and site, and
its message and short traceback where the application records errors), the worker
running it, its progress and a pending cancel request. The
payload only with ``--show-payload``. ``--json``: one object.

JOB_ID may be the whole id or its beginning, as long as one job's id begins with it
(``show 0193a5e2-7c4f-7d1``; hyphens may be left out). Exit 1 if no job's id begins
with it; exit 2 if several do (they are named: give more of the id)."""
from __future__ import annotations

import argparse
from typing import List, Tuple

from caravel_lite.admin import JobDetail, QueueAdmin
from caravel_lite.cli import common, operating


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cmd = subparsers.add_parser("show", help="one job's envelope and failure history",
                                description=__doc__.replace("``", ""))
    operating.add_database_and_json(cmd)
    cmd.add_argument("job_id", type=operating.job_id_prefix, metavar="JOB_ID",
                     help="the job's id, or enough of its beginning to name one job")
    cmd.add_argument("--show-payload", action="store_true",
                     help="include the payload (and a kept result)")
    cmd.set_defaults(run=run)


SHOWN_MATCHES = 3


def _one_job_id(admin: QueueAdmin, prefix: str) -> str:
    """The id of the one job whose id begins with ``prefix``."""
    matches = admin.job_ids(prefix, limit=SHOWN_MATCHES + 1)
    if not matches:
        raise common.CommandFailed(f"no job whose id begins with {prefix}")
    if len(matches) > 1:
        named = ", ".join(str(m) for m in matches[:SHOWN_MATCHES])
        more = ", ..." if len(matches) > SHOWN_MATCHES else ""
        raise common.UsageError(f"{prefix} begins the ids of several jobs ({named}{more}): "
                                f"give more of the id")
    return str(matches[0])


def run(args: argparse.Namespace) -> int:
    with operating.AdminSession(args) as admin:
        job = admin.job(_one_job_id(admin, args.job_id), include_payload=args.show_payload)
    if job is None:  # deleted between the two reads
        raise common.CommandFailed(f"no job {args.job_id}")
    if args.json:
        data = operating.plain(job)
        if not args.show_payload:
            del data["payload"], data["result"]
        operating.print_json(data)
        return common.OK
    fields = [("job", job.job_id), ("queue", job.queue_name), ("tenant", job.tenant_id),
              ("wire name", job.wire_name), ("state", job.state.value),
              ("priority", job.priority.name.lower()),
              ("attempts", f"{job.attempts} of {job.max_attempts}"),
              ("replays", job.replay_count),
              ("last failure", job.last_failure.value if job.last_failure else "-"),
              ("idempotency key", job.idempotency_key or "-"),
              ("enqueued", operating.when(job.enqueued_at)),
              ("due", operating.when(job.available_at)),
              ("claimed", operating.when(job.claimed_at)),
              ("lease expires", operating.when(job.lease_expires_at)),
              ("finished", operating.when(job.finished_at)),
              ("updated", operating.when(job.updated_at))]
    fields += _control_lines(job)
    if job.workflow_id is not None:  # its chain or batch (caravel_lite.workflows)
        fields.append((job.workflow_kind or "workflow", f"{job.workflow_id} "
                                                        f"({job.workflow_role})"))
    if args.show_payload:
        fields.append(("payload", job.payload))
        if job.result is not None:
            fields.append(("result", job.result))
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        print(f"{name.ljust(width)}  {common.safe_text(value)}")
    print()
    if not job.failures:
        print("failure history: none recorded")
        return common.OK
    print(f"failure history ({len(job.failures)}, oldest first):")
    operating.table(("#", "FAILED (UTC)", "REPLAY", "ATTEMPT", "CATEGORY", "EXCEPTION", "SITE",
                     "DESCRIPTION"),
                    [(f.seq, operating.when(f.failed_at), f.replays, f.attempt,
                      f.category.value, f.error_type or "-", f.site or "-",
                      f.description or "-") for f in job.failures], right=(0, 2, 3))
    for f in job.failures:  # only where the application records errors
        if f.message or f.trace:
            print(f"\n#{f.seq} message: {common.safe_text(f.message or '-')}")
            for line in (f.trace or "").splitlines():
                print(f"  {common.safe_text(line)}")
    return common.OK


def _control_lines(job: JobDetail) -> List[Tuple[str, object]]:
    """The worker running it, its progress, a pending cancel request (when there)."""
    lines: List[Tuple[str, object]] = []
    if job.worker_id is not None:
        lines.append(("worker", job.worker_id))
    if job.progress_done is not None:
        total = f" of {job.progress_total}" if job.progress_total is not None else ""
        lines.append(("progress", f"{job.progress_done}{total} "
                                  f"(at {operating.when(job.progress_at)})"))
    if job.cancel_requested_at is not None:
        lines.append(("cancel requested", operating.when(job.cancel_requested_at)))
    return lines
