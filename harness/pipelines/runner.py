"""Runs a plan's command steps on this machine the way a Buildkite agent would.

Per job: one `bash -e -c` process in its own process group, in the checkout
root, with the pipeline env, the step env and the BUILDKITE_* variables an
agent sets (BUILDKITE_PARALLEL_JOB / _COUNT for `parallelism`), a
`buildkite-agent` stand-in first on PATH, timeout_in_minutes enforced (the
process group gets SIGTERM, then SIGKILL; reported as exit status -1 like
Buildkite), retry.automatic rules applied, soft_fail honoured, artifact_paths
collected. Results go to a report folder through harness.util.report.

SIGINT and SIGTERM (what `timeout` and CI agents send) stop the run the same
way: every running job's process group gets SIGTERM, the grace period, then
SIGKILL, and is waited for, no new job
or retry starts, the report of the jobs that finished is written with
"interrupted": true, `latest` moves to it, and the exit status is 130 / 143.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from harness.util import interrupt
from harness.util import report

from harness.pipelines.plan import Plan

OK_STATES = ("passed", "soft_failed", "skipped")


@dataclass
class Options:
    root: Path
    jobs: int = 1  # parallel jobs of one step run at once
    minute: float = 60.0  # seconds in a timeout "minute" (tests shrink it)
    grace: float = 10.0  # SIGTERM -> SIGKILL, as the agent's cancel-grace-period
    verbose: bool = False
    quiet: bool = False  # only failures and the final line
    reports_root: Path | None = None


@dataclass
class Attempt:
    exit_status: int
    signal: str | None
    timed_out: bool
    seconds: float
    log: str


@dataclass
class JobResult:
    step: object
    job: int | None
    count: int
    attempts: list[Attempt] = field(default_factory=list)
    state: str = "failed"

    @property
    def name(self) -> str:
        return self.step.key if self.job is None else f"{self.step.key}[{self.job}]"


# ---------------------------------------------------------------- retry / soft_fail rules


def _retry_rules(step) -> list[dict]:
    retry = step.raw.get("retry")
    auto = retry.get("automatic") if isinstance(retry, dict) else None
    if auto in (True, "true"):
        return [{"exit_status": "*", "limit": 2}]
    if isinstance(auto, dict):
        return [auto]
    return [r for r in auto if isinstance(r, dict)] if isinstance(auto, list) else []


def _norm_signal(name) -> str:
    return str(name).upper().removeprefix("SIG")


def _rule_matches(rule: dict, a: Attempt) -> bool:
    st = rule.get("exit_status", "*")
    if st != "*" and a.exit_status not in (st if isinstance(st, list) else [st]):
        return False
    sig = rule.get("signal")
    if sig not in (None, "*"):
        if str(sig).lower() == "none":
            if a.signal:
                return False
        elif a.signal is None or _norm_signal(sig) != _norm_signal(a.signal):
            return False
    reason = rule.get("signal_reason")
    actual = "cancel" if a.timed_out else "none"
    return reason in (None, "*") or reason == actual


def _soft_fails(step, exit_status: int) -> bool:
    sf = step.raw.get("soft_fail")
    if sf in (True, "true"):
        return True
    if isinstance(sf, list):
        for rule in sf:
            st = rule.get("exit_status", "*") if isinstance(rule, dict) else None
            if st == "*" or st == exit_status:
                return True
    return False


# ---------------------------------------------------------------- the run


class Runner:
    def __init__(self, plan: Plan, opts: Options, argv_hint: str):
        self.plan = plan
        self.opts = opts
        self.root = Path(opts.root).resolve()
        reports_root = opts.reports_root or self.root / "reports"
        self.rd = report.ReportDir.create(f"pipeline-{plan.target}", root=reports_root)
        self.run_dir = self.rd.path.resolve()
        self.bin = self._install_agent_stub()
        self.build_id = str(uuid.uuid4())
        self.argv_hint = argv_hint
        self.results: list[JobResult] = []
        self.states: dict[int, str] = {}
        self._procs: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._stopping = False  # set once on interruption: no new process may start
        self._running: dict[int, str] = {}  # pid -> job name, for the interrupted report
        self._broken: list = []  # command steps not run because a dependency failed
        self._threads: list[threading.Thread] = []
        self.title = f"{Path(plan.pipeline.path).name} on {plan.target}"

    # -- buildkite-agent stand-in

    def _install_agent_stub(self) -> Path:
        bin_dir = self.run_dir / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        pkg_root = Path(__file__).resolve().parents[2]  # the folder holding `harness`
        shim = bin_dir / "buildkite-agent"
        shim.write_text(
            "#!/bin/sh\n"
            "# Local stand-in for buildkite-agent (harness.pipelines.agent_stub).\n"
            f'PYTHONPATH="{pkg_root}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" '
            '-m harness.pipelines.agent_stub "$@"\n'
        )
        shim.chmod(0o755)
        return bin_dir

    # -- environment a job sees

    def _job_env(self, step, job: int | None, retry_count: int) -> dict[str, str]:
        b = self.plan.build
        env = dict(self.plan.build.get("env", {}))  # upload env + pipeline env
        env.update(step.env)
        label = step.label.replace("%n", str(job if job is not None else 0))
        artifact_paths = step.raw.get("artifact_paths") or []
        if isinstance(artifact_paths, list):
            artifact_paths = ";".join(artifact_paths)
        timeout = step.raw.get("timeout_in_minutes")
        env.update({
            "CI": "true",
            "BUILDKITE": "true",
            "BUILDKITE_AGENT_NAME": f"local-{self.plan.target}",
            "BUILDKITE_AGENT_META_DATA_QUEUE": step.queue or "",
            "BUILDKITE_ORGANIZATION_SLUG": "local",
            "BUILDKITE_PIPELINE_SLUG": b.get("pipeline.slug") or "local",
            "BUILDKITE_BUILD_ID": self.build_id,
            "BUILDKITE_BUILD_NUMBER": str(b.get("build.number") or 0),
            "BUILDKITE_BRANCH": b.get("build.branch") or "",
            "BUILDKITE_COMMIT": b.get("build.commit") or "HEAD",
            "BUILDKITE_MESSAGE": b.get("build.message") or "",
            "BUILDKITE_SOURCE": b.get("build.source") or "local",
            "BUILDKITE_TAG": b.get("build.tag") or "",
            "BUILDKITE_PULL_REQUEST": "false",
            "BUILDKITE_BUILD_CHECKOUT_PATH": str(self.root),
            "BUILDKITE_JOB_ID": str(uuid.uuid4()),
            "BUILDKITE_STEP_ID": str(uuid.uuid5(uuid.NAMESPACE_URL, self.build_id + step.index)),
            "BUILDKITE_STEP_KEY": step.key or "",
            "BUILDKITE_LABEL": label,
            "BUILDKITE_COMMAND": "\n".join(step.commands),
            "BUILDKITE_ARTIFACT_PATHS": artifact_paths,
            "BUILDKITE_TIMEOUT": str(timeout) if timeout else "false",
            "BUILDKITE_RETRY_COUNT": str(retry_count),
            "HARNESS_PIPELINE_RUN_DIR": str(self.run_dir),
            "HARNESS_PIPELINE_ARTIFACTS": self._artifact_dir(step, job),
        })
        if job is not None:
            env["BUILDKITE_PARALLEL_JOB"] = str(job)
            env["BUILDKITE_PARALLEL_JOB_COUNT"] = str(step.raw.get("parallelism"))
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', os.defpath)}"
        return env

    def _artifact_dir(self, step, job) -> str:
        name = step.key if job is None else f"{step.key}#{job}"
        return str(self.run_dir / "artifacts" / name)

    # -- one attempt of one job

    def _attempt(self, step, job, retry_count) -> Attempt:
        suffix = "" if job is None else f".{job}"
        suffix += "" if retry_count == 0 else f".retry{retry_count}"
        log_path = self.run_dir / "logs" / f"{step.key}{suffix}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = self._job_env(step, job, retry_count)
        script = "\n".join(step.commands)
        minutes = step.raw.get("timeout_in_minutes")
        limit = minutes * self.opts.minute if isinstance(minutes, int) else None
        start = time.monotonic()
        with open(log_path, "wb") as log:
            log.write(f"$ {script}\n".encode())
            log.flush()
            # Started under the lock that the interruption takes: a job is either
            # in _procs (and gets killed) or never starts.
            with self._lock:
                if self._stopping:
                    raise _Stopped
                proc = subprocess.Popen(
                    ["/bin/bash", "-e", "-c", script],
                    cwd=self.root,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: a timeout kills everything it started
                )
                self._procs.add(proc)
                self._running[proc.pid] = f"{step.key}{'' if job is None else '#' + str(job)}"
            prefix = f"[{step.key}{'' if job is None else '#' + str(job)}] ".encode()
            reader = threading.Thread(target=self._pump, args=(proc.stdout, log, prefix), daemon=True)
            reader.start()
            timed_out, sig = False, None
            try:
                proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                timed_out = True
                sig = self._stop(proc)
            reader.join(timeout=5)
            with self._lock:
                self._procs.discard(proc)
                self._running.pop(proc.pid, None)
        rc = proc.returncode
        if timed_out:
            status = -1  # what Buildkite reports for a job stopped at its timeout
            log_note = f"\n# timed out after {minutes} min ({limit:.1f}s); stopped with {sig}\n"
            with open(log_path, "ab") as log:
                log.write(log_note.encode())
        elif rc < 0:
            sig = signal.Signals(-rc).name
            status = 128 - rc
        else:
            status = rc
        return Attempt(status, sig, timed_out, time.monotonic() - start, str(log_path))

    def _pump(self, pipe, log, prefix):
        for line in iter(pipe.readline, b""):
            log.write(line)
            log.flush()
            if self.opts.verbose:
                sys.stdout.buffer.write(prefix + line)
                sys.stdout.flush()
        pipe.close()

    def _stop(self, proc) -> str:
        """SIGTERM the job's process group, SIGKILL what is left of it after the grace period,
        like an agent cancel; returns once no process of the group is alive."""
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        end = time.monotonic() + self.opts.grace
        while interrupt.group_alive(proc.pid) and time.monotonic() < end:
            time.sleep(0.02)
        used = "SIGTERM"
        if interrupt.group_alive(proc.pid):
            used = "SIGKILL"
            survivors = interrupt.kill_group(proc.pid)
            if survivors:
                print(f"moe-harness pipeline run: processes {survivors} survived SIGKILL", file=sys.stderr, flush=True)
        proc.wait()
        return used

    # -- one job: attempts until it passes or no retry rule allows another

    def _run_job(self, step, job, count) -> JobResult:
        result = JobResult(step, job, count)
        rules = _retry_rules(step)
        used = [0] * len(rules)
        started = time.time()
        while True:
            try:
                a = self._attempt(step, job, len(result.attempts))
            except _Stopped:
                result.state = "interrupted"
                return result
            result.attempts.append(a)
            if self._stopping:
                result.state = "interrupted"  # killed by the interruption: no retry
                return result
            if a.exit_status == 0:
                result.state = "passed"
                break
            idx = next((i for i, r in enumerate(rules) if _rule_matches(r, a)), None)
            if idx is not None and used[idx] < int(rules[idx].get("limit", 2)):
                used[idx] += 1
                self._say(f"  retry {step.key}{'' if job is None else '#' + str(job)}: exit {a.exit_status} matches retry rule {rules[idx]}")
                continue
            result.state = "soft_failed" if _soft_fails(step, a.exit_status) else "failed"
            break
        self._collect_artifacts(step, job, started)
        return result

    def _collect_artifacts(self, step, job, since: float):
        """artifact_paths: copy files the job wrote (mtime >= its start) into the run folder."""
        paths = step.raw.get("artifact_paths") or []
        patterns = paths.split(";") if isinstance(paths, str) else list(paths)
        dest_root = Path(self._artifact_dir(step, job))
        for pattern in patterns:
            for name in glob.glob(str(self.root / pattern.strip()), recursive=True):
                src = Path(name)
                if not src.is_file() or src.is_symlink() or src.stat().st_mtime < since - 1:
                    continue
                try:
                    rel = src.resolve().relative_to(self.root)
                except ValueError:
                    continue
                if self.run_dir in src.resolve().parents:
                    continue  # this run's own folder
                dest = dest_root / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest)

    # -- the whole plan

    def _say(self, text: str, important: bool = False):
        if important or not self.opts.quiet:
            print(text, flush=True)

    def _deps_ok(self, step) -> tuple[bool, str]:
        for e in self.plan.graph.deps.get(id(step), []):
            state = self.states.get(id(e.dep))
            if state in OK_STATES or e.allow_failure:
                continue
            return False, f"{e.dep.key or e.dep.index} {state}"
        return True, ""

    def run(self) -> int:
        meta = {
            "pipeline": str(self.plan.pipeline.path),
            "target": self.plan.target,
            "branch": self.plan.build.get("build.branch"),
            "commit": self.plan.build.get("build.commit"),
            "report": str(self.run_dir),
        }
        stop = None
        with interrupt.catch_signals() as guard:
            try:
                for step in self.plan.graph.order:
                    self._run_step(step, meta)
                guard.shield()
            except KeyboardInterrupt as exc:  # interrupt.Interrupted for SIGTERM too
                stop = exc
                meta = {**meta, **self._stop_everything(interrupt.signal_name(exc))}
            self._finish(meta, stop is not None)
        if stop is not None:
            self._say(f"interrupted by {interrupt.signal_name(stop)}: partial report {self.run_dir}/summary.md", True)
            return interrupt.exit_code(stop)
        return 0 if all(r.state in OK_STATES for r in self.results) and not self._broken else 1

    def _stop_everything(self, signame: str) -> dict:
        """Kill every running job's process group and wait until none of them is alive."""
        with self._lock:
            self._stopping = True
            procs = list(self._procs)
            killed = sorted(self._running.values())
        # as an agent cancels a job: SIGTERM to every job's group (a `moe-harness run`
        # inside writes its report marked interrupted), the grace period, then SIGKILL
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        end = time.monotonic() + self.opts.grace
        while any(interrupt.group_alive(p.pid) for p in procs) and time.monotonic() < end:
            time.sleep(0.02)
        survivors = []
        for p in procs:
            survivors += interrupt.kill_group(p.pid)
            p.wait()  # the job's shell is our child: reap it
        for t in self._threads:
            if t.ident is not None:  # the signal may have come between two starts
                t.join()  # their processes are gone and no new one can start
        info = {"interrupted": True, "signal": signame, "killed_jobs": killed}
        if survivors:
            info["survivors"] = survivors
            print(f"moe-harness pipeline run: processes {survivors} survived SIGKILL", file=sys.stderr, flush=True)
        return info

    def _run_step(self, step, meta):
        decision = self.plan.decision(step)
        ok, why = self._deps_ok(step)
        if not decision.run:
            self.states[id(step)] = "skipped"
            if step.kind == "command" and decision.reason:
                self._say(f"- skip {step.key}: {decision.reason}")
            return
        if not ok:
            self.states[id(step)] = "broken"
            if step.kind == "command":
                self._broken.append(step)
                self._say(f"- not run {step.key}: waits on {why}")
                self.rd.record(self._broken_result(step, why), meta, self.title, self.title)
            return
        if step.kind != "command":
            self.states[id(step)] = "passed"
            return
        count = step.parallelism
        jobs = [None] if "parallelism" not in step.raw else list(range(int(step.raw["parallelism"])))
        self._say(f"> {step.key}: {step.label} ({len(jobs)} job{'s' if len(jobs) > 1 else ''})")
        results: list[JobResult] = [None] * len(jobs)
        gate = threading.Semaphore(max(1, self.opts.jobs))

        def work(i, job):
            with gate:
                results[i] = self._run_job(step, job, count)

        threads = [threading.Thread(target=work, args=(i, j)) for i, j in enumerate(jobs)]
        self._threads = threads
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.2)  # short joins keep Ctrl-C responsive
        for r in results:
            self.results.append(r)
            self.rd.record(self._job_result(r), meta, self.title, self.title)
            last = r.attempts[-1]
            mark = {"passed": "ok", "soft_failed": "soft-failed", "failed": "FAILED"}[r.state]
            self._say(f"  {mark} {r.name}: exit {last.exit_status} in {sum(a.seconds for a in r.attempts):.1f}s"
                      f" ({len(r.attempts)} attempt{'s' if len(r.attempts) > 1 else ''}); log {last.log}",
                      r.state == "failed")
            if r.state != "passed" and not self.opts.verbose:
                for line in _tail(last.log, 15).splitlines():
                    self._say(f"    | {line}", r.state == "failed")
        states = [r.state for r in results]
        self.states[id(step)] = "failed" if "failed" in states else ("soft_failed" if "soft_failed" in states else "passed")

    # -- results

    def _reproduce(self, step) -> str:
        return f"{self.argv_hint} --step {step.key}"

    def _job_result(self, r: JobResult) -> dict:
        last = r.attempts[-1]
        details = {
            "step": r.step.key,
            "label": r.step.label,
            "queue": r.step.queue,
            "exit_status": last.exit_status,
            "attempts": len(r.attempts),
            "exit_statuses": [a.exit_status for a in r.attempts],
            "seconds": round(sum(a.seconds for a in r.attempts), 3),
            "log": last.log,
        }
        if r.job is not None:
            details["parallel_job"] = f"{r.job}/{r.count}"
        if last.timed_out:
            details["timed_out"] = f"{r.step.raw.get('timeout_in_minutes')} min, stopped with {last.signal}"
        if r.state != "passed":
            details["reproduce"] = self._reproduce(r.step)
            details["log_tail"] = _tail(last.log, 30)
        message = {
            "passed": "",
            "soft_failed": f"soft-failed with exit {last.exit_status} (soft_fail: {r.step.env.get('HARNESS_SOFT_FAIL_REASON', 'no reason given')})",
            "failed": f"exit {last.exit_status} after {len(r.attempts)} attempt(s)",
        }[r.state]
        return {
            "name": r.name,
            "classname": f"{Path(self.plan.pipeline.path).name}.{self.plan.target}",
            "passed": r.state in ("passed", "soft_failed"),
            "state": r.state,
            "time": details["seconds"],
            "message": message,
            "details": details,
        }

    def _broken_result(self, step, why) -> dict:
        return {
            "name": step.key,
            "classname": f"{Path(self.plan.pipeline.path).name}.{self.plan.target}",
            "passed": False,
            "state": "broken",
            "message": f"not run: it waits on {why}",
            "details": {"step": step.key, "reproduce": self._reproduce(step)},
        }

    def _finish(self, meta, interrupted):
        results = list(self.rd._results)
        meta = {**meta, "interrupted": interrupted}
        title = self.title
        self.rd.write_report(title, results, meta, suite_name=title)
        summary = report.summary_markdown(title, results, meta) + _annotations(self.run_dir)
        self.rd.write_text("summary.md", summary)
        self.rd.update_latest()
        failed = [r for r in results if not r["passed"]]
        self._say(f"{len(results) - len(failed)} passed, {len(failed)} failed; report {self.run_dir}", True)


class _Stopped(Exception):
    """A job that was about to start when the run was interrupted."""


def _tail(path, lines: int) -> str:
    try:
        data = Path(path).read_bytes()[-20000:].decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def _annotations(run_dir: Path) -> str:
    folder = run_dir / "annotations"
    if not folder.is_dir():
        return ""
    out = ["", "## Annotations", ""]
    for f in sorted(folder.glob("*.md")):
        out += [f"### {f.stem}", "", f.read_text(), ""]
    return "\n".join(out)


def find_artifacts(run_dir: Path, pattern: str) -> list[tuple[Path, str]]:
    """(file, path relative to the checkout) for uploaded artifacts matching a Buildkite-style glob."""
    out = []
    base = run_dir / "artifacts"
    for holder in sorted(base.glob("*")) if base.is_dir() else []:
        for f in sorted(holder.rglob("*")):
            rel = f.relative_to(holder).as_posix()
            if f.is_file() and fnmatch.fnmatch(rel, pattern):
                out.append((f, rel))
    return out
