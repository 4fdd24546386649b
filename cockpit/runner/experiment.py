"""One experiment end to end: plan, check the box, launch, follow, diagnose, journal, stop.

Both faces use this: ``cockpit run`` prints the events, the TUI turns them into messages.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import psutil

from cockpit.core.benchrequest import BenchRequest
from cockpit.core.cluster import Cluster, NodeLaunch
from cockpit.core.errors import CockpitError
from cockpit.core.layout import Layout
from cockpit.core.outcome import FAILED, LAUNCHING, READY, STOPPED
from cockpit.core.perfmodel import for_verdict, with_prediction
from cockpit.core.planner import FAILS, Setup, Verdict, nearest_fitting, plan_all, plan_layout
from cockpit.core.records import LaunchFacts, LaunchPrediction, PredictedMemory
from cockpit.core.secrets import Scrubber, launch_secrets_env, redact_argv
from cockpit.engines import api_keys
from cockpit.engines.arguments import knob_next_step
from cockpit.runner.cluster import (
    SPEC_ENV,
    describe_nodes,
    keeper_argv,
    keeper_spec,
    preflight,
    simulated_node_env,
)
from cockpit.runner.diagnose import describe_end
from cockpit.runner.events import (
    BenchDone,
    BenchLevel,
    Diagnosis,
    Event,
    Failed,
    Launching,
    LogLine,
    Planned,
    Ready,
    Stopped,
)
from cockpit.runner.registry import ServerEntry, new_log_path
from cockpit.runner.signals import held_signals
from cockpit.runner.supervisor import (
    ServerEnded,
    ServerHandle,
    Supervisor,
    busy_port,
    free_local_port,
    keeps_nodes,
)
from cockpit.store.journal import Journal
from cockpit.store.profile import Profile
from cockpit.telemetry.base import GpuSample
from cockpit.telemetry.monitor import Monitor

log = logging.getLogger(__name__)

GIB = 2**30
BUSY_GPU_BYTES = 2 * GIB  # a GPU holding more than this (or any process) is not free
DEFAULT_STARTUP_TIMEOUT_S = 1800.0
# Launches refused before anything ran, and why: the port or GPUs held by something else (the box
# is busy), or the plan itself (a layout the planner says fails, one the engine cannot express).
PORT_IN_USE, GPUS_BUSY = "port-in-use", "gpus-busy"
PLANNED_FAILURE, INEXPRESSIBLE = "planned-failure", "inexpressible"
BOX_BUSY = (PORT_IN_USE, GPUS_BUSY)
BENCH_END_GRACE_S = 5.0  # a bench that met errors waits this long to learn whether its server is ending

# Diagnosis kinds that a different layout can cure; the others want a flag or the box fixed.
_LAYOUT_KINDS = {
    "oom",
    "fp8-block",
    "attention-heads",
    "kv-heads",
    "world-size",
    "unrecognized-args",
    "eplb",
    "moe-split",
    "ep-needs-experts",
    "pp-unsupported",
}


def free_gpus(samples: Sequence[GpuSample], allowed: Sequence[int] | None) -> list[int]:
    allowed_set = set(allowed) if allowed is not None else None
    free = []
    for s in samples:
        if allowed_set is not None and s.index not in allowed_set:
            continue
        if s.processes or (s.memory_used or 0) > BUSY_GPU_BYTES:
            continue
        free.append(s.index)
    return free


def describe_holders(
    samples: Sequence[GpuSample], indices: Sequence[int], held: Mapping[int, ServerEntry] | None = None
) -> str:
    """Who holds each busy GPU: a server of a cockpit (even one still loading), else NVML's view."""
    held = held or {}
    parts = []
    for index in sorted(set(held) & set(indices)):
        entry = held[index]
        who = f"pid {entry.pid}" if entry.pid > 0 else "a server being started"
        parts.append(f"GPU {index}: {who} ({entry.layout} on {entry.engine}, experiment {entry.experiment})")
    for s in samples:
        if s.index in held:
            continue
        if s.index in indices and s.processes:
            who = ", ".join(f"pid {p.pid} ({p.name}, {p.used_bytes / GIB:.0f} GiB)" for p in s.processes)
            parts.append(f"GPU {s.index}: {who}")
        elif s.index in indices:
            parts.append(f"GPU {s.index}: {(s.memory_used or 0) / GIB:.0f} GiB in use")
    return "; ".join(parts)


@dataclass
class Launcher:
    """Launches, follows and stops the experiments of one profile. What runs is the planner's
    argv for ``setup``, launcher words included (the simulator is one launcher among others);
    ``sim`` only adds the simulated box to the environment and marks the server's entry.
    ``cockpit.lab.lab`` wires one with the rest of a lab."""

    profile: Profile
    setup: Setup
    journal: Journal
    supervisor: Supervisor
    monitor: Monitor | None = None
    sim: bool = False
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S
    handle: ServerHandle | None = None
    experiment: int | None = None
    # every layout planned, with the setup it was planned with (a replan on the launcher's thread
    # must never leave the verdicts of one setup cached under another)
    _planned: tuple[Setup, list[Verdict]] | None = field(default=None, repr=False)
    # experiment -> the setup it was launched (or re-attached) with: its predictions are made with
    # what the box had taught before this launch, not with what the launch itself taught
    _launched: dict[int, Setup] = field(default_factory=dict, repr=False)
    _stopping: set[int] = field(default_factory=set, repr=False)  # experiments we are stopping
    # experiment -> how its server ended without cockpit stopping it (``watch``), and the lock
    # that makes a stop and such an end exclude each other: the end is said once, by one of them
    _ended: dict[int, str] = field(default_factory=dict, repr=False)
    _end_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _scrubber: Scrubber | None = field(default=None, repr=False)  # every launch's secret values
    # experiment -> every node's argv, on a cluster (the journal holds the head's)
    node_argvs: dict[int, list[tuple[str, ...]]] = field(default_factory=dict, repr=False)
    cancels: int = 0  # stops asked for so far; a launch asked for before the last one does not start
    # Told the experiment's id when something new was measured (a launch came up, a bench ended):
    # the lab learns from the journal there. What it raises is logged, never passed on.
    after_measure: Callable[[int], None] | None = None

    # -- before launch ----------------------------------------------------------------------

    def replan(self, setup: Setup) -> None:
        """Plan from now on with ``setup`` (the box taught the planner something new); an
        experiment already launched keeps the setup it was launched with for its predictions."""
        self.setup = setup

    def verdicts(self, setup: Setup | None = None) -> list[Verdict]:
        """Every layout planned with ``setup`` (the launcher's own by default), kept for the setup
        last asked about."""
        setup = self.setup if setup is None else setup
        planned = self._planned
        if planned is None or planned[0] is not setup:
            planned = self._planned = (setup, plan_all(setup))
        return planned[1]

    def suggest(self, verdict: Verdict) -> str:
        """What to try instead: for server flags the engine's table refused, the line with the
        flags it most likely means (another layout would carry the same flags); else the nearest
        layouts that fit."""
        if verdict.reasons and verdict.reasons[0].rule == "server-args":
            return knob_next_step(self.setup.engine.options, verdict.layout)
        layouts = list(verdict.alternatives) or nearest_fitting(verdict, self.verdicts())
        fitting = {str(v.layout) for v in self.verdicts() if v.verdict != FAILS}
        names = [f"`{x}`" for x in layouts if str(x) in fitting] or [f"`{x}`" for x in layouts]
        return "try " + " or ".join(names[:3]) if names else ""

    def api_key(self, handle: ServerHandle | None = None) -> str | None:
        """The key the server wants from clients (readiness probe, benchmark), if it was given
        one: read from the argv the engine got, so a key typed as a knob counts as well as the
        profile's (``handle``: that server; by default the one followed now)."""
        argv = self._server_argv(handle or self.handle)
        keys = api_keys(self.setup.engine.name, argv, {**os.environ, **self.profile.env})
        return keys[0] if keys else None

    def _server_argv(self, handle: ServerHandle | None) -> Sequence[str]:
        """The whole argv of the server (profile's args and the layout's knobs): ours from its
        spawn; a re-attached one from its process, once the registry vouches it is that process
        (journal and registry hold it redacted); else the profile's own."""
        if handle is not None and keeps_nodes(handle.entry):  # across nodes: the head's, not the keeper's
            heads = self.node_argvs.get(handle.entry.experiment)
            return list(heads[0]) if heads else [*(self.profile.command or ()), *self.profile.args]
        spawned = handle.popen.args if handle is not None and handle.popen is not None else None
        if isinstance(spawned, list):  # the supervisor spawns an argv list
            return [str(arg) for arg in spawned]
        if handle is not None and handle.entry.alive():
            with contextlib.suppress(psutil.Error):
                argv = psutil.Process(handle.pid).cmdline()
                self._learn_secrets(argv)
                return argv
        return [*(self.profile.command or ()), *self.profile.args]

    def environment(self, gpus: Sequence[int]) -> dict[str, str]:
        env = dict(self.profile.env)
        if not self.setup.hardware.on_cpu:  # vLLM's CPU build places its ranks by NUMA node, not this
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
        if self.sim:
            hw = self.setup.hardware
            env["COCKPIT_SIM_GPUS"] = f"{hw.count}x{hw.gpu.key}"
            env["COCKPIT_SIM_CALIBRATION"] = json.dumps(dict(self.profile.calibration))
        return env

    # -- the experiment ---------------------------------------------------------------------

    def cancel_launches(self) -> None:
        """A stop came: a launch still waiting for the launch lock gives up (no engine starts)."""
        self.cancels += 1

    def run(self, layout: Layout, *, force: bool = False, since: int | None = None) -> Iterator[Event]:
        """Plan, launch and follow one layout; the last event is Ready or Failed. ``since``: the
        value of ``cancels`` when the launch was asked for; a stop after that cancels it."""
        layout.refuse_blanked()  # `--api-key ***` read back from stored text: never an engine's key
        setup = self.setup  # one setup for the plan and the predictions journaled with it
        verdict = plan_layout(setup, layout)
        self._learn_secrets(verdict.argv)  # before any line of this launch is shown or stored
        used = verdict.placement.gpus_used if verdict.placement else 0
        allowed = (
            list(self.profile.gpu_ids)
            if self.profile.gpu_ids is not None
            else list(range(setup.hardware.count))
        )
        registry = self.supervisor.registry
        failure: Diagnosis | None = None
        # Choosing GPUs and registering the server are one step under the box-wide lock: a second
        # cockpit waits here, then sees this server's GPUs and port as taken.
        since = self.cancels if since is None else since
        with registry.launch_lock():
            if self.cancels != since:  # stopped while it waited for another cockpit's launch
                return
            samples = self.monitor.sample_now() if self.monitor else []
            others = registry.claims()
            held = {gpu: entry for entry in others for gpu in entry.gpus}
            free = [g for g in (free_gpus(samples, allowed) if samples else allowed) if g not in held]
            gpus = tuple(free[:used]) if used <= len(free) else tuple(allowed[:used])
            self.experiment = exp = self.journal.start_experiment(
                profile=self.profile.name,
                model=setup.model_path,
                engine=setup.engine.name,
                layout=str(layout),
                argv=list(redact_argv(verdict.argv)),
                gpus=list(gpus),
                predicted=predicted_at_launch(setup, verdict),
                gpu_type=setup.hardware.gpu.key,
                engine_version=setup.engine.version,
                simulated=self.sim,
            )
            try:
                refusal = self._refusal(verdict, force, used, free, samples, held, others)
                if refusal is None and self.cluster is not None:
                    log_path = new_log_path(exp, str(layout))
                    argv, env, failure = self._spawn_cluster(exp, verdict, log_path, str(layout), gpus)
                elif refusal is None:
                    argv = verdict.argv  # as planned, shown and journaled: the launcher is in it
                    env = self.environment(gpus)
                    log_path = new_log_path(exp, str(layout))
                    failure = self._spawn(exp, argv, env, log_path, str(layout), gpus)
            except BaseException as exc:  # interrupted or refused before anything ran: journal the end
                if self.handle is None:
                    with contextlib.suppress(CockpitError):
                        self.journal.set_outcome(
                            exp, STOPPED if isinstance(exc, KeyboardInterrupt) else FAILED
                        )
                raise
        placement = str(verdict.placement) if verdict.placement else "not expressible"
        yield Planned(
            exp,
            str(layout),
            f"{verdict.verdict} ({verdict.headline})" if verdict.headline else verdict.verdict,
            placement,
            gpus,
        )
        failure = refusal or failure
        if failure is not None:  # its words may quote the knobs (an engine's refusal of a value)
            failure = self._scrubbed_diagnosis(failure)
            self.journal.set_outcome(exp, FAILED, diagnosis=failure)
            yield Failed(exp, failure)
            return
        handle = self.handle
        assert handle is not None  # _spawn set it
        self._launched[exp] = setup  # kept while it runs (dropped by _forget): nothing for a refusal
        try:
            self.journal.update_experiment(
                exp, log_path=str(log_path), pid=handle.pid, port=handle.entry.port
            )
            if exp in self.node_argvs:  # across nodes: the head's argv, as the rendezvous made it
                self.journal.update_experiment(exp, argv=list(redact_argv(argv)))
        except BaseException:
            self._stop_unjournaled(handle)
            raise
        shown_env = {k: v for k, v in env.items() if k not in ("COCKPIT_SIM_CALIBRATION", SPEC_ENV)}
        yield Launching.redacted(exp, argv, handle.pid, str(log_path), shown_env)
        yield from self.follow(handle)

    @property
    def cluster(self) -> Cluster | None:
        """The profile's nodes, when the layouts run across several boxes."""
        return getattr(self.profile, "cluster", None)

    def _spawn_cluster(
        self, exp: int, verdict: Verdict, log_path, layout: str, gpus: Sequence[int]
    ) -> tuple[Sequence[str], dict[str, str], Diagnosis | None]:
        """Check every node and start the node keeper, which starts the nodes
        (cockpit.runner.nodekeeper). Returns what is shown and journaled: the head's argv, the
        environment, and a refusal if a node failed its checks."""
        cluster, setup = self.cluster, self.setup
        assert cluster is not None and verdict.placement is not None
        checked = preflight(
            cluster,
            setup.engine.name,
            setup.command or setup.engine.default_command,
            self.profile.port,
            simulated=self.sim,
        )
        if isinstance(checked, Diagnosis):
            return verdict.argv, {}, checked
        launches = setup.engine.node_launches(
            verdict.placement,
            setup.hardware,
            cluster.nodes,
            checked.rendezvous,
            setup.model_path or setup.model.name,
            self.profile.port,
            (*setup.server_args, *verdict.layout.knobs),
            setup.command,
        )
        launches = [replace(x, env={**self.node_environment(x), **x.env}) for x in launches]
        self._learn_secrets(
            [a for x in launches for a in x.argv], {k: v for x in launches for k, v in x.env.items()}
        )
        local_port = free_local_port()
        env = {
            SPEC_ENV: keeper_spec(
                cluster=cluster,
                launches=launches,
                engine=setup.engine.name,
                experiment=exp,
                local_port=local_port,
                port=self.profile.port,
                simulated=self.sim,
            )
        }
        argv = keeper_argv()
        failure = self._spawn(exp, argv, env, log_path, layout, gpus, port=local_port)
        shown = {
            **describe_nodes(launches),
            "rendezvous": f"{checked.rendezvous.head}:{checked.rendezvous.port}",
            **({"version": str(checked.versions[0])} if checked.versions and checked.versions[0] else {}),
        }
        self.node_argvs[exp] = [tuple(x.argv) for x in launches]
        return launches[0].argv, shown, failure

    def _nodes_launched(self, handle: ServerHandle) -> int:
        """The nodes a launch runs on (a layout that fits in one node runs on the head alone)."""
        if not keeps_nodes(handle.entry):
            return 1
        if handle.entry.experiment in self.node_argvs:
            return len(self.node_argvs[handle.entry.experiment])
        verdict = plan_layout(self.setup, handle.entry.layout)  # re-attached: as it was planned
        return verdict.placement.nodes if verdict.placement else self.setup.hardware.nodes

    def node_environment(self, launch: NodeLaunch) -> dict[str, str]:
        """One node's engine environment: the profile's, its GPUs, and on a simulated cluster
        the node's own simulated box."""
        env = dict(self.profile.env)
        hw = self.setup.hardware
        if not hw.on_cpu:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, launch.gpus))
        if self.sim:
            env.update(simulated_node_env(launch.host, hw))
            env["COCKPIT_SIM_CALIBRATION"] = json.dumps(dict(self.profile.calibration))
        return env

    def _spawn(
        self,
        exp: int,
        argv: Sequence[str],
        env: dict[str, str],
        log_path,
        layout: str,
        gpus: Sequence[int],
        *,
        port: int | None = None,
    ) -> Diagnosis | None:
        """Start the engine; ``self.handle`` is set before any interrupt can land. A failure to
        start (no such launcher) comes back as the Diagnosis to report."""

        def own(handle: ServerHandle) -> None:
            self.handle = handle
            if self.monitor:
                self.monitor.track(exp, gpus)

        try:
            self.supervisor.start(
                experiment=exp,
                argv=argv,
                env=env,
                port=self.profile.port if port is None else port,
                log_path=log_path,
                engine=self.setup.engine.name,
                profile=self.profile.path or self.profile.name,  # its file: a re-attach opens the same one
                layout=layout,
                gpus=gpus,
                simulated=self.sim,
                on_started=own,
            )
        except OSError as exc:  # no such launcher, not executable
            return Diagnosis(
                "launch-error",
                f"cannot start `{argv[0]}`: {exc.strerror or exc}",
                "set server.command in the profile to the engine's launcher, e.g. [/path/to/venv/bin/vllm, serve]",
            )
        return None

    def _stop_unjournaled(self, handle: ServerHandle) -> None:
        """The journal failed under a server we started: stop it rather than leave it unrecorded."""
        self._stopping.add(handle.entry.experiment)
        self.supervisor.stop(handle, grace=5.0, memory_timeout=5.0)
        self._forget(handle)

    def follow(self, handle: ServerHandle) -> Iterator[Event]:
        """Follow a launched or re-attached server to Ready or Failed, journaling the outcome.
        A journal that fails on the way stops the server (it would run unrecorded)."""
        self.handle = handle
        # a re-attached server is predicted with what this cockpit knew before it learned from it
        self._launched.setdefault(handle.entry.experiment, self.setup)
        try:
            yield from self._follow(handle)
        except CockpitError:
            if self.handle is handle:
                self._stop_unjournaled(handle)
            raise

    def _follow(self, handle: ServerHandle) -> Iterator[Event]:
        exp = handle.entry.experiment
        ready_paths = self.setup.engine.ready_paths
        nodes = self._nodes_launched(handle)
        events = self.supervisor.follow(
            handle,
            timeout=self.startup_timeout,
            ready_paths=ready_paths,
            api_key=self.api_key(handle),
            nodes=nodes,
        )
        for event in map(self._scrubbed, events):
            if isinstance(event, Failed) and exp in self._stopping:
                return  # it died of our own SIGTERM: `stop` journals and reports that
            if isinstance(event, Failed):
                event = replace(event, diagnosis=self._with_next_step(event.diagnosis, handle.entry.layout))
                self.journal.set_outcome(exp, FAILED, diagnosis=event.diagnosis)
                self._record_facts(exp, event.facts)  # what it logged before it failed is true all the same
                self._record_peaks(exp)
                self.supervisor.stop(handle, grace=5.0, memory_timeout=10.0)
                self._forget(handle)
            elif isinstance(event, Ready):
                record = self.journal.experiment(exp)
                if record is not None and record.outcome == READY and record.load_seconds is not None:
                    # Re-attached to a server that was ready before: its load time is the journaled
                    # one, not the time from its start until we looked again.
                    event = replace(event, load_seconds=record.load_seconds)
                else:
                    self.journal.set_outcome(exp, READY, load_seconds=event.load_seconds)
                self._record_facts(exp, event.facts)
                self._record_peaks(exp)
            yield event
            if isinstance(event, (Ready, Failed)):
                # Journaled above; the refit (a second or so) comes after the face has shown it.
                self._measured(exp)

    def bench(self, bench: BenchRequest) -> Iterator[Event]:
        """Benchmark the ready server in a child `cockpit bench`; levels land in the journal."""
        from cockpit.runner.benchrun import bench_child, run_bench_child

        handle = self.handle
        if handle is None:
            ended = self._ended.get(self.experiment) if self.experiment is not None else None
            raise CockpitError(
                f"no server is running: the last one ended ({ended}); `try <layout>` first"
                if ended
                else "no server is running: `try <layout>` first"
            )
        exp = handle.entry.experiment
        self._predict_bench(exp, handle.entry.layout, bench)
        argv = bench_child(handle.url, None, bench, self.profile, exp)
        troubled = False  # a level met errors: the server may have ended under it
        for event in run_bench_child(argv, exp, self.api_key(handle)):
            if isinstance(event, BenchLevel):
                troubled = troubled or bool(event.result.errors or event.result.failed)
            if isinstance(event, BenchDone) and not event.interrupted:
                event = self._with_server_end(event, handle, troubled or bool(event.error))
            yield event
        self._record_peaks(exp)
        self._measured(exp)

    def _with_server_end(self, done: BenchDone, handle: ServerHandle, troubled: bool) -> BenchDone:
        """A bench whose server ended under it says so, not only "cannot reach ... is the
        server up?" (a server stopped gracefully may close its port a moment before it exits)."""
        if not troubled and done.levels:  # every level measured well: the server served it
            return done
        exp = handle.entry.experiment
        if troubled and exp not in self._ended and not self._answers(handle):
            self.supervisor.wait_exit(handle, BENCH_END_GRACE_S)
        ended, code = self._ended.get(exp), handle.returncode()
        if ended is None and exp not in self._stopping and code is not None:
            ended = describe_end(code if handle.ours else None).reason
        if ended is None:
            return done
        return replace(done, error=f"the server ended during the bench: {ended}")

    def _answers(self, handle: ServerHandle) -> bool:
        """Whether the server answers its health check now (then it did not end)."""
        return self.supervisor.answers(handle, self.setup.engine.ready_paths, self.api_key(handle))

    def stop(self, reason: str = "stopped by the user") -> Stopped | None:
        handle = self.handle
        if handle is None:
            return None
        exp = handle.entry.experiment
        with self._end_lock:
            if exp in self._ended:  # it ended on its own: ``watch`` says so and cleans up
                return None
            self._stopping.add(exp)  # before the signal: the exit it causes is ours, not a failure
        with held_signals():  # a stop half done would leave the journal saying it still runs
            with contextlib.suppress(CockpitError):  # a failing journal must not keep the server up
                self._record_peaks(exp)
            try:
                how = self.supervisor.stop(handle)
            finally:
                self._forget(handle)
            journal_stopped(self.journal, exp)
        return Stopped(exp, f"{reason}: {how}")

    def ended(self, exp: int) -> str | None:
        """How the experiment's server ended without cockpit stopping it, if it did."""
        return self._ended.get(exp)

    def watch(self, handle: ServerHandle, quit: threading.Event) -> Iterator[Event]:
        """Watch a ready server until it ends or ``quit`` is set. An end cockpit did not cause
        comes as the server's last lines and ``Stopped`` (with ``ended``), once it is reaped,
        unregistered and journaled; an end cockpit caused comes as nothing (``stop`` says it)."""
        exp = handle.entry.experiment
        watched = self.supervisor.watch(
            handle, quit=quit, health_paths=self.setup.engine.ready_paths, api_key=self.api_key(handle)
        )
        for item in watched:
            if isinstance(item, LogLine):
                yield self._scrubbed(item)
                continue
            stopped = self._end(handle, item)
            if stopped is None:
                return
            for line in item.last_lines:
                yield self._scrubbed(LogLine(exp, line))
            yield stopped

    def _end(self, handle: ServerHandle, ended: ServerEnded) -> Stopped | None:
        """The server ended on its own: claim the end (None when cockpit is stopping it), then
        take its leftovers down, forget it and journal how it ended."""
        exp = handle.entry.experiment
        ending = describe_end(ended.returncode, ended.last_lines)
        reason = self._scrub(ending.reason)
        with self._end_lock:
            if exp in self._stopping:
                return None
            self._ended[exp] = reason
        with held_signals():
            with contextlib.suppress(CockpitError):
                self._record_peaks(exp)
            try:  # workers it left behind, its registry entry, its GPU memory
                how = self.supervisor.stop(handle, grace=5.0, memory_timeout=10.0)
            finally:
                self._forget(handle)
            with contextlib.suppress(
                CockpitError, sqlite3.Error
            ):  # the screen must learn of the end all the same
                journal_stopped(self.journal, exp)
                self.journal.add_note(
                    exp, f"{time.strftime('%Y-%m-%d %H:%M:%S')} the server ended after ready: {reason}"
                )
        held = how.partition("; ")[2]  # "its GPU memory was still held after 10 s", if so
        again = f"`try {handle.entry.layout}` launches it again" if handle.entry.layout else ""
        return Stopped(exp, "; ".join(part for part in (reason, held, again) if part), ending.words)

    def note_hangup(self, handle: ServerHandle) -> None:
        """The terminal went away: the server is left running, and the journal says where."""
        self.journal.add_note(
            handle.entry.experiment,
            f"{time.strftime('%Y-%m-%d %H:%M:%S')} cockpit got SIGHUP (its terminal closed); the server "
            f"keeps running as pid {handle.pid}: `cockpit attach {handle.pid}`, `cockpit stop {handle.pid}`",
        )

    def _scrubbed(self, event: Event) -> Event:
        """The engine prints its own arguments (vLLM: `non-default args: {'hf_token': ...}`): its
        lines are diagnosed as written, then shown and journaled with the secrets blanked."""
        if isinstance(event, LogLine):
            return replace(event, text=self._scrub(event.text))
        if isinstance(event, Failed):
            return replace(event, diagnosis=self._scrubbed_diagnosis(event.diagnosis))
        return event

    def _scrubbed_diagnosis(self, d: Diagnosis) -> Diagnosis:
        """A diagnosis quotes the engine's lines (and a refusal its knobs): shown and journaled blanked."""
        scrub = self._scrub
        return replace(d, cause=scrub(d.cause), next_step=scrub(d.next_step) if d.next_step else d.next_step)

    def _scrub(self, text: str) -> str:
        """The text with the secrets of every launch so far blanked."""
        if self._scrubber is None:
            self._learn_secrets([*(self.profile.command or ()), *self.profile.args])
        assert self._scrubber is not None
        return self._scrubber.text(text)

    def _learn_secrets(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        """Know the secret values of a launch's whole argv (profile's args and the layout's
        knobs), its environment (``env``: a cluster node's own too) and inherited credentials:
        the engine prints them in words no name rule foresees (vLLM: `non-default args:
        {'api_key': ['V']}`)."""
        found = Scrubber.from_launch(
            [*(self.profile.command or ()), *self.profile.args, *argv],
            launch_secrets_env({**self.profile.env, **(env or {})}, os.environ),
        )
        self._scrubber = found if self._scrubber is None else self._scrubber.joined(found)

    def _forget(self, handle: ServerHandle) -> None:
        """The server is gone: no handle, no peaks tracked for it."""
        if self.monitor:
            self.monitor.untrack(handle.entry.experiment)
        self._launched.pop(handle.entry.experiment, None)
        if self.handle is handle:
            self.handle = None

    # -- helpers ----------------------------------------------------------------------------

    def _refusal(
        self, verdict: Verdict, force: bool, used: int, free: list[int], samples, held, others
    ) -> Diagnosis | None:
        if verdict.placement is None:
            return Diagnosis(INEXPRESSIBLE, verdict.reasons[0].message, self.suggest(verdict))
        if verdict.verdict == FAILS and not force:
            suggestion = self.suggest(verdict)
            return Diagnosis(
                PLANNED_FAILURE,
                f"not launched: the planner says {verdict.layout} fails: {verdict.reasons[0]}",
                (suggestion + "; " if suggestion else "") + "--force launches it anyway",
            )
        if self.cluster is not None:  # the head's port is checked on the head (cockpit.runner.cluster)
            holder = None
        else:
            holder = busy_port("127.0.0.1", self.profile.port)
        holder = holder or next(
            (
                f"pid {e.pid or '(starting)'} ({e.layout} of cockpit)"
                for e in others
                if e.port == self.profile.port
            ),
            None,
        )
        if holder is not None:
            return Diagnosis(
                PORT_IN_USE,
                f"port {self.profile.port} is already in use by {holder}; nothing launched",
                "stop that server (`cockpit servers`, `cockpit stop PID`) or set server.port in the profile",
            )
        if used <= self.setup.hardware.count and len(free) < used:
            busy = sorted({s.index for s in samples if s.index not in free} | set(held))
            return Diagnosis(
                GPUS_BUSY,
                f"{verdict.layout} needs {used} free GPUs, {len(free)} are free ({describe_holders(samples, busy, held)}); nothing launched",
                "stop what holds them (`cockpit servers`, `cockpit stop PID`) or pick a smaller layout",
            )
        return None

    def _with_next_step(self, diagnosis: Diagnosis, layout: str) -> Diagnosis:
        """Put the layouts that fit in front of a failure a different layout can cure."""
        if diagnosis.kind not in _LAYOUT_KINDS or not layout:
            return diagnosis
        try:  # the registry's text: its secrets blanked, or written by another cockpit's version
            suggestion = self.suggest(plan_layout(self.setup, layout))
        except (CockpitError, ValueError):
            return diagnosis
        if not suggestion:
            return diagnosis
        return replace(
            diagnosis, next_step=suggestion + (f" ({diagnosis.next_step})" if diagnosis.next_step else "")
        )

    def _predict_bench(self, exp: int, layout: str, bench: BenchRequest) -> None:
        """The tok/s predicted for each of the bench's levels, journaled before it runs, with the
        setup the experiment was launched with: what this very launch taught must not make its
        own prediction (the results say "predicted when the layout was launched")."""
        setup = self._launched.get(exp, self.setup)
        filled = bench.filled(self.profile.bench)
        levels, input_len, output_len = filled.concurrency, filled.input_len, filled.output_len
        try:
            verdict = plan_layout(setup, layout)  # its secrets blanked: planned, never launched
        except (CockpitError, ValueError) as exc:  # a re-attached server's layout this cockpit cannot plan
            log.warning("no tok/s prediction for experiment %s (%s): %s", exp, layout, exc)
            return
        predicted = with_prediction(setup, verdict, levels, input_len, output_len)
        if predicted.predicted_tok_s and predicted.predicted_by is not None:
            per_level = {str(c): round(v, 2) for c, v in predicted.predicted_tok_s.items()}
            self.journal.merge_predicted(
                exp,
                {
                    "tok_s": {f"{input_len}/{output_len}": per_level},
                    "learned_runs": setup.learned.runs,
                    "speed": predicted.predicted_by.label,
                },
            )

    def _record_facts(self, exp: int, facts: LaunchFacts) -> None:
        """The facts an event carries, journaled; a log that said nothing leaves the row as it is."""
        if facts:
            self.journal.set_facts(exp, facts)

    def _measured(self, exp: int) -> None:
        """Tell ``after_measure``; a hook that fails must not take the experiment down with it."""
        if self.after_measure is None:
            return
        try:
            self.after_measure(exp)
        except Exception:
            log.exception("after_measure failed for experiment %s", exp)

    def _record_peaks(self, exp: int) -> None:
        if self.monitor:
            self.monitor.sample_now()
            peaks = self.monitor.peaks(exp)
            if peaks:
                self.journal.record_peak(exp, peaks)


def predicted_at_launch(setup: Setup, verdict: Verdict) -> LaunchPrediction:
    """What the planner says of a launch, kept beside what the engine will log, and which source
    predicts its speeds (the bench adds their tok/s)."""
    perf = for_verdict(setup, verdict)
    return LaunchPrediction(
        memory=PredictedMemory.from_json(verdict.memory.to_json()) if verdict.memory else None,
        learned_runs=setup.learned.runs,
        speed=perf.source.label if perf is not None else "",
    )


def journal_stopped(journal: Journal, exp: int, entry: ServerEntry | None = None) -> None:
    """A stopped server's experiment gets its end, and `stopped` if it never served. A server
    stopped from its registry ``entry`` lends its pid, log and port to an experiment that lacks
    them: its cockpit can die (kill -9) between the spawn, listed at once, and journaling the pid."""
    record = journal.experiment(exp)
    if record is None:
        return
    if entry is not None and record.pid is None:
        journal.update_experiment(exp, pid=entry.pid, log_path=entry.log_path, port=entry.port)
    if record.outcome == LAUNCHING:
        journal.set_outcome(exp, STOPPED)
    elif record.ended is None:
        journal.update_experiment(exp, ended=time.time())
