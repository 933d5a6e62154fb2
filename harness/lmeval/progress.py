"""Progress lines while lm-eval runs a phase: requests done, rate and ETA,
at most one line every `every` seconds (and the last), so a long phase is
never silent and a short one prints one line."""
from __future__ import annotations

import time


class Meter:
    def __init__(self, phase: str, say, every: float = 2.0, clock=time.perf_counter):
        self.phase, self.say, self.every, self.clock = phase, say, every, clock
        self.t0 = clock()
        self.last: float | None = None
        self.done = 0

    def update(self, kind: str, done: int, total: int) -> None:
        """`done` of `total` requests of one kind (loglikelihood, generate_until) are scored."""
        now = self.clock()
        if done < total and self.last is not None and now - self.last < self.every:
            return
        if done < total and self.last is None and now - self.t0 < self.every:
            return
        self.last = now
        seconds = max(now - self.t0, 1e-9)
        rate = done / seconds
        eta = (total - done) / rate if rate > 0 else float("inf")
        tail = f"ETA {eta:.0f} s" if done < total else f"done in {seconds:.1f} s"
        self.say(f"      {self.phase}: {kind} {done}/{total} requests, {rate:.1f}/s, {tail}")

    def restart(self) -> None:
        """A new kind of request starts: its rate and ETA count from now."""
        self.t0, self.last = self.clock(), None
