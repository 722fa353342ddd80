"""`processes`: N worker processes on this machine (`--workers N`).

This process is one of the N: it measures groups from the first second while the other N - 1 start,
so that N processes are never slower than one. Work goes out by reference group (planning/groups.py): each
float64 reference is then solved by exactly one worker, and nothing is shared between the processes
but the folder, a queue of tasks (the yardsticks' pieces first, then the groups) and a queue of events
back. Each worker gets the sweep's thread choice (core/threads.py), made for a share of cores // N, so N
workers do not oversubscribe the cores; on CUDA, worker i takes GPU i mod (visible GPUs). Workers come
from multiprocessing's fork server (start_method.py), which imported torch once, and ignore SIGINT:
Ctrl-C is the main process's to handle, as in a sequential sweep. A worker whose roundoff_analyzer is not the copy
this process imported (package_identity.py) is refused in one line, before it reads its settings.
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import threading

import torch

from ..core.breakpoints import make_breakpoints_inert
from ..core.devices import resolve_device, worker_devices
from ..core.environment import os_error_line
from ..core.errors import one_line
from ..core.threads import torch_threads
from ..planning.groups import reference_groups
from .base import EXECUTORS, Execution, ExecutionReport, Executor
from .in_process import ProcessProblems, measure_in_process, yardstick_reference, yardstick_tasks
from .package_identity import IDENTITY, differs
from .parent_death import die_with_parent
from .start_method import children_ignore_sigint, start_processes, warm_up_workers, worker_context
from .worker import Worker, WorkerSettings

POLL_S = 0.2
JOIN_TIMEOUT_S = 30


def worker_main(index: int, package: tuple[str, str], settings: bytes, tasks, events, stop, parent_pid: int) -> None:
    """A worker process: take groups until the queue says None or a stop is requested; report every step.
    `package`: the parent's package identity, which this process's must be; `settings`: its WorkerSettings, pickled,
    read only once the package is known to be the parent's (another copy's classes would not read them)."""
    die_with_parent(parent_pid)
    make_breakpoints_inert()  # a fork server's process started before the sweep set the variable
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    other = differs(package)
    if other is not None:
        events.put(("refused", index, f"worker {index} refused: {other}; its rows would be another code's numbers"))
        events.put(("exit", index, None))
        return
    try:
        worker = Worker(pickle.loads(settings))
    except Exception as exc:  # noqa: BLE001 - reported to the main process, which names it
        events.put(("failed", index, f"worker {index} could not start: {one_line(exc)}"))
        events.put(("exit", index, None))
        return
    while not stop.is_set():
        group = tasks.get()
        if group is None:
            break
        if isinstance(group, tuple):  # a piece of the yardsticks, for every process of the sweep
            worker.problems.prepare(group)
            continue
        try:
            report = worker.run(
                group,
                begin=lambda config: events.put(("begin", index, config)),
                finish=lambda config, row: events.put(("finish", index, (config, row))),
                stop_requested=stop.is_set,
            )
            events.put(("group", index, report))
        except Exception as exc:  # noqa: BLE001 - one broken group must not take the others with it
            cause = (
                os_error_line(exc) if isinstance(exc, OSError) else one_line(exc)
            )  # a full disk says which file and why
            events.put(("failed", index, f"worker {index}, {group[0].label()}: {cause}"))
    events.put(("exit", index, None))


def measure_here(execution: Execution, tasks, report: ExecutionReport) -> ExecutionReport:
    """This process's share: groups from the same queue as the workers', until none is left or a stop is asked for.
    Its reference solves go into a report of its own (the workers' are counted by another thread)."""
    mine = ExecutionReport()
    problems = ProcessProblems.of(execution.plan, execution.store)  # once per process, for each problem
    with torch_threads(execution.plan.threads):
        while not execution.stop_requested():
            try:
                group = tasks.get(timeout=1.0)
            except queue.Empty:
                return mine
            if group is None:  # the groups are gone (one None for each process)
                return mine
            if isinstance(group, tuple):
                problems.prepare(group)
                continue
            shared = problems.shared(execution.plan, group[0].problem_key)  # one reference, so one problem
            progress = execution.progress
            completed = measure_in_process(
                group, shared, execution.store, progress.begin, progress.finish, execution.stop_requested
            )
            mine.add_references(shared.references.n_solves, shared.references.seconds)
            if not completed:
                report.interrupted = True
    return mine


def _not_started(events, index: int, exc: BaseException) -> None:
    events.put(("failed", index, f"worker {index} could not start: {one_line(exc)}"))
    events.put(("exit", index, None))


def _started(processes: list) -> list:
    return [process for process in processes if process.pid is not None]


def _join_starter(starter: threading.Thread | None) -> None:
    """Wait until every worker has been started: one that is still starting can be neither stopped nor joined."""
    while starter is not None and starter.is_alive():  # joined in steps, so that a Ctrl-C still reaches this thread
        starter.join(POLL_S)


class ProcessesExecutor(Executor):
    name = "processes"
    description = "N worker processes on this machine (--workers N), one reference group at a time each"
    runs_here = True

    def unavailable_reason(self) -> str | None:
        return None

    def target_device(self, config) -> torch.device:
        return resolve_device(config.device)

    def settings(self, config) -> dict:
        return {"executor": self.name, "workers": config.workers}

    def warm_up(self, config) -> None:
        if config.workers > 1:
            warm_up_workers()

    def run(self, execution: Execution) -> ExecutionReport:
        plan, report = execution.plan, ExecutionReport()
        assert plan.config.workers is not None  # planning chose the number of processes
        groups = reference_groups(execution.pending, yardstick_reference(plan))
        n_workers = min(plan.config.workers, len(groups))
        if n_workers == 0:
            return report
        spawn = worker_context()
        tasks, events, stop = spawn.Queue(), spawn.Queue(), spawn.Event()
        # This process is one of the N: it measures from the start while the others start,
        # so N are never slower than one.
        # The yardsticks' pieces go first, so that the processes compute them side by side before measuring.
        # Then one None per process, this one's included: a process that finds the queue empty would wait for more.
        for group in [*(yardstick_tasks(plan) if n_workers > 1 else ()), *groups, *[None] * n_workers]:
            tasks.put(group)
        assert plan.threads is not None  # planning chose them for an executor that runs here
        threads = plan.threads.threads  # chosen for a share of the cores (core/threads.py)
        out_dir = str(execution.store.root.resolve())
        worker_settings = [
            WorkerSettings(plan.config, out_dir, device, threads)
            for device in worker_devices(plan.device, n_workers)[1:]
        ]
        processes = [
            spawn.Process(
                target=worker_main,
                args=(i, IDENTITY, pickle.dumps(settings), tasks, events, stop, os.getpid()),
                name=f"roundoff-worker-{i}",
                daemon=True,
            )
            for i, settings in enumerate(worker_settings)
        ]
        execution.progress.note(
            f"this process and {n_workers - 1} worker process(es), {threads} torch thread(s) each, "
            f"{len(groups)} reference groups"
        )
        with children_ignore_sigint():
            starter = start_processes(spawn, processes, lambda i, exc: _not_started(events, i, exc))
        collector = threading.Thread(
            target=self._collect, args=(execution, processes, events, stop, report), daemon=True
        )
        try:
            collector.start()
            here = measure_here(execution, tasks, report)
            while collector.is_alive():  # joined in steps, so that a second Ctrl-C still reaches this thread
                collector.join(POLL_S)
            report.add_references(here.reference_solves, here.reference_seconds)
        except KeyboardInterrupt:
            # A second Ctrl-C: stop now. The configurations in progress are dropped; their shards were never written.
            report.interrupted = True
            _join_starter(starter)
            for process in _started(processes):
                process.terminate()
        finally:
            _join_starter(starter)
            for process in _started(processes):
                process.join(JOIN_TIMEOUT_S)
            tasks.cancel_join_thread()  # groups nobody took are dropped with the queue
        return report

    def _collect(self, execution: Execution, processes, events, stop, report: ExecutionReport) -> None:
        """Pass the workers' events to the progress until every worker is gone; a stop request is forwarded once."""
        exited: set[int] = set()
        working_on: dict[int, str] = {}
        while True:
            if not stop.is_set() and execution.stop_requested():
                stop.set()
                report.interrupted = True
            try:
                kind, index, payload = events.get(timeout=POLL_S)
            except queue.Empty:
                # A worker's events are in the pipe before its exit code is set, so an empty queue then is final.
                if all(p.exitcode is not None or i in exited for i, p in enumerate(processes)):
                    break
                continue
            if kind == "begin":
                working_on[index] = payload.label()
                execution.progress.begin(payload)
            elif kind == "finish":
                working_on.pop(index, None)
                execution.progress.finish(*payload)
            elif kind == "group":
                report.add_references(payload.reference_solves, payload.reference_seconds)
            elif kind == "failed":
                report.problems.append(payload)
            elif kind == "refused":  # said now: the sweep goes on without it, and may still complete
                report.problems.append(payload)
                execution.progress.note(payload)
            elif kind == "exit":
                exited.add(index)
                if len(exited) == len(processes):  # each worker's last event: nothing can follow
                    break
        for index, process in enumerate(processes):
            if index not in exited:
                during = f" while measuring {working_on[index]}" if index in working_on else ""
                report.problems.append(f"worker {index} died{during} (exit code {process.exitcode})")


EXECUTORS.register(ProcessesExecutor())
