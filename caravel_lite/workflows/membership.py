"""How a job says it belongs to a chain or a batch: keys in its stored options
(``job_options``, which every claim reads already), so that a worker finishing a job
outside any workflow reads and writes nothing more than before.

``workflow``: the chain's or batch's id; ``role``: ``step`` (of a chain; ``next`` names
the step after it), ``member`` (of a batch) or ``callback`` (of a batch: the job its
outcome enqueues). Older code reading these options ignores the keys it does not know."""
from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any, Dict, Optional

__all__ = ["Role", "Membership", "MARKER", "MARKED", "UNMARKED", "membership_of",
           "with_membership"]

# Present in every member's options text and in no other's: the cheap first test.
MARKER = '"workflow":'
# The LIKE pattern (bound as a parameter: the drivers that format with % would read
# a literal one) finding MARKER in job_options, and the condition leaving out the jobs
# it finds, for statements that act on plain jobs many at a time. ({p}: the
# database's parameter mark.)
MARKED = f"%{MARKER}%"
UNMARKED = "(job_options IS NULL OR job_options NOT LIKE {p})"


class Role(str, enum.Enum):
    STEP = "step"
    MEMBER = "member"
    CALLBACK = "callback"


@dataclass(frozen=True)
class Membership:
    workflow_id: str
    role: Role
    next_id: Optional[str] = None


def membership_of(options: Optional[str]) -> Optional[Membership]:
    """The membership stored in a job's options text; None for a job outside any
    workflow, or options this code cannot read (then the job finishes as a plain one)."""
    if options is None or MARKER not in options:
        return None
    try:
        data = json.loads(options)
        role = Role(data["role"])
        workflow = data["workflow"]
        following = data.get("next")
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(workflow, str) or not (following is None or isinstance(following, str)):
        return None
    return Membership(workflow, role, following)


def with_membership(options: Optional[str], workflow_id: str, role: Role,
                    next_id: Optional[str] = None) -> str:
    """``options`` (a job's stored options text, or None) with the membership added."""
    data: Dict[str, Any] = json.loads(options) if options is not None else {}
    data["workflow"] = workflow_id
    data["role"] = role.value
    if next_id is not None:
        data["next"] = next_id
    return json.dumps(data, sort_keys=True, separators=(",", ":"))
