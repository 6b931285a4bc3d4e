"""JobRegistry: the only map between stable wire names, job types and handlers.

A worker resolves a stored wire name through this registry and nothing else; a name
that is not registered in this process is a failure (UNKNOWN_JOB_TYPE), never a class
to import.
"""
from __future__ import annotations

import dataclasses
import inspect
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Type, TypeVar

from caravel_lite import codec, limits, validation
from caravel_lite.errors import InvalidField, UnknownJobType
from caravel_lite.job_options import NO_OPTIONS, TypeOptions, type_options
from caravel_lite.values import JobContext, Priority

__all__ = ["JobRegistry", "JobDefinition", "JobContext"]

J = TypeVar("J")
R = TypeVar("R")
Handler = Callable[[Any, JobContext], Any]


@dataclass(frozen=True)
class JobDefinition:
    wire_name: str
    job_type: type
    handler: Handler
    is_async: bool
    # What the type sets for its jobs (queue, priority, attempts, backoff, timeout,
    # keep_result); a Dispatch overrides it field by field.
    options: TypeOptions = NO_OPTIONS
    # Flow control (caravel_lite.limits): at most this many leased jobs per
    # concurrency key, at most rate_limit.count starts per period.
    concurrency_limit: Optional[int] = None
    rate_limit: Optional[limits.RateLimit] = None


class JobRegistry:
    """Wire name <-> job type <-> handler. Names are versioned contracts
    (``"reports.generate.v1"``): keep an old handler registered while its jobs exist.

    A wire name or a job type can be registered once; a second registration of either
    raises ``ValueError``.
    """

    def __init__(self) -> None:
        self._by_name: Dict[str, JobDefinition] = {}
        self._by_type: Dict[type, JobDefinition] = {}
        # Types registered while their annotations named a class not defined yet.
        self._unchecked: Set[type] = set()
        self._lock = threading.Lock()
        # Whether a registered type declares a concurrency or rate limit.
        self.flow_controlled = False

    def register(self, wire_name: str, job_type: Type[J],
                 handler: Callable[[J, JobContext], Any], *, queue: Optional[str] = None,
                 priority: Optional[Priority] = None, max_attempts: Optional[int] = None,
                 retry_delay: Optional[timedelta] = None,
                 max_retry_delay: Optional[timedelta] = None,
                 timeout: Optional[timedelta] = None,
                 keep_result: bool = False,
                 concurrency_limit: Optional[int] = None,
                 rate_limit: Optional[Tuple[int, timedelta]] = None) -> JobDefinition:
        """Register ``handler`` (sync or ``async def``) for ``job_type`` under ``wire_name``.

        The keywords are the type's options, each overriding the queue's
        ``QueueOptions`` and overridden by a ``Dispatch`` value (see
        :mod:`caravel_lite.job_options`): ``queue`` (a ``Dispatch`` may then omit it),
        ``priority``, ``max_attempts``, ``retry_delay``, ``max_retry_delay`` (the
        ranges of ``QueueOptions``), ``timeout`` (1 ms .. 7 days: the longest one
        attempt's handler may run) and ``keep_result`` (store the handler's return
        value, read with ``queue.result``). Checked here, ``InvalidField`` naming the
        field; nothing is registered then.

        ``job_type`` must be a dataclass whose every field the payload codec can store
        and decode again (see :func:`caravel_lite.codec.check_job_type`); otherwise
        ``InvalidField("job_type")`` names the field, and nothing is registered. Only
        annotations naming a class not defined yet (a forward reference to a class
        further down the module) are judged later, when the first job is stored."""
        validation.check_wire_name(wire_name)
        options = type_options(queue=queue, priority=priority, max_attempts=max_attempts,
                               retry_delay=retry_delay, max_retry_delay=max_retry_delay,
                               timeout=timeout, keep_result=keep_result)
        if not (isinstance(job_type, type) and dataclasses.is_dataclass(job_type)):
            raise InvalidField("job_type", "must be a dataclass type")
        # Refused now, naming the field, rather than at every enqueue; a forward
        # reference to a class not defined yet is checked when the first job is stored.
        try:
            codec.check_job_type(job_type)
            unresolved = False
        except codec.UnresolvedAnnotations:
            unresolved = True
        if not callable(handler):
            raise InvalidField("handler", "must be callable")
        definition = JobDefinition(
            wire_name, job_type, handler, inspect.iscoroutinefunction(handler), options,
            limits.check_concurrency_limit("concurrency_limit", concurrency_limit),
            limits.check_rate_limit("rate_limit", rate_limit))
        with self._lock:
            if wire_name in self._by_name:
                raise InvalidField("wire_name", f"{wire_name!r} is already registered")
            if job_type in self._by_type:
                raise InvalidField("job_type", f"{job_type.__name__} is already registered as "
                                   f"{self._by_type[job_type].wire_name!r}")
            self._by_name[wire_name] = definition
            self._by_type[job_type] = definition
            if unresolved:
                self._unchecked.add(job_type)
            if definition.concurrency_limit is not None or definition.rate_limit is not None:
                self.flow_controlled = True
        return definition

    def job(self, wire_name: str, job_type: Type[J], *, queue: Optional[str] = None,
            priority: Optional[Priority] = None, max_attempts: Optional[int] = None,
            retry_delay: Optional[timedelta] = None,
            max_retry_delay: Optional[timedelta] = None, timeout: Optional[timedelta] = None,
            keep_result: bool = False,
            concurrency_limit: Optional[int] = None,
            rate_limit: Optional[Tuple[int, timedelta]] = None
            ) -> Callable[[Callable[[J, JobContext], R]], Callable[[J, JobContext], R]]:
        """Decorator form of :meth:`register` (the same keywords); returns the handler
        unchanged.

        For a type checker the decorated handler keeps its parameter and return types
        (a coroutine for ``async def``), and a handler whose first parameter does not
        accept ``job_type``, or whose second is not a :class:`JobContext`, is an error.
        """
        def decorate(handler: Callable[[J, JobContext], R]) -> Callable[[J, JobContext], R]:
            self.register(wire_name, job_type, handler, queue=queue, priority=priority,
                          max_attempts=max_attempts, retry_delay=retry_delay,
                          max_retry_delay=max_retry_delay, timeout=timeout,
                          keep_result=keep_result,
                          concurrency_limit=concurrency_limit, rate_limit=rate_limit)
            return handler
        return decorate

    def for_job(self, job: object) -> JobDefinition:
        """The definition for a job instance's exact type; ``UnknownJobType`` if absent."""
        definition = self._by_type.get(type(job))
        if definition is None:
            raise UnknownJobType(f"job type {type(job).__name__} is not registered")
        if self._unchecked and definition.job_type in self._unchecked:
            codec.check_job_type(definition.job_type)  # InvalidField("job_type") if still not
            self._unchecked.discard(definition.job_type)
        return definition

    def for_type(self, job_type: type) -> JobDefinition:
        """The definition registered for ``job_type``; ``UnknownJobType`` if absent."""
        definition = self._by_type.get(job_type)
        if definition is None:
            name = getattr(job_type, "__name__", repr(job_type))
            raise UnknownJobType(f"job type {name} is not registered")
        return definition

    def for_name(self, wire_name: str) -> Optional[JobDefinition]:
        """The definition for a stored wire name, or None when it is not registered here."""
        return self._by_name.get(wire_name)

    def names(self) -> List[str]:
        return sorted(self._by_name)

    def __contains__(self, wire_name: object) -> bool:
        return wire_name in self._by_name


def require_registry(value: object) -> JobRegistry:
    if not isinstance(value, JobRegistry):
        raise InvalidField("registry", "must be a caravel_lite.JobRegistry")
    return value
