"""Step dependencies as Buildkite schedules them: wait steps (implicit) plus depends_on (explicit).

Rules followed (Buildkite's "Depends on" page):
- a wait (or block) step depends on every step before it; every later step depends on it;
- `continue_on_failure: true` on a wait lets later steps run even when earlier ones failed;
- `depends_on` adds explicit edges; `depends_on: ~` (null) drops the implicit ones;
- a group's depends_on applies to its children; depending on a group means on all its children;
- `allow_dependency_failure` / `allow_failure` let a step run after a failed dependency.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.pipelines.model import Pipeline, Step

BARRIERS = ("wait", "block")


@dataclass(frozen=True)
class Edge:
    dep: Step
    allow_failure: bool


@dataclass
class Graph:
    deps: dict[int, list[Edge]]  # id(step) -> what it waits for
    order: list[Step]  # a topological order, file order where free
    problems: list[tuple[Step, str]]  # (step, message): unknown keys, duplicate keys, cycles


def build(pipeline: Pipeline) -> Graph:
    problems: list[tuple[Step, str]] = []
    keyed: dict[str, Step] = {}
    for s in pipeline.steps:
        if s.key is None:
            continue
        if s.key in keyed:
            problems.append((s, f"key {s.key!r} is also used by {keyed[s.key].index}"))
        else:
            keyed[s.key] = s

    deps: dict[int, list[Edge]] = {}

    def explicit(step: Step) -> list[Edge]:
        allow_all = str(step.raw.get("allow_dependency_failure", False)).lower() == "true"
        out = []
        for key, allow in step.depends_on():
            target = keyed.get(key)
            if target is None:
                problems.append((step, f"depends_on: no step has key {key!r}"))
                continue
            out.append(Edge(target, allow or allow_all))
        return out

    def walk(steps: list[Step], outer: list[Edge]) -> None:
        barrier: Step | None = None
        since: list[Step] = []
        for s in steps:
            if s.kind in BARRIERS:
                cont = str(s.raw.get("continue_on_failure", False)).lower() == "true"
                d = [Edge(x, cont) for x in since]
                if barrier is not None:
                    d.append(Edge(barrier, cont))
                deps[id(s)] = d + explicit(s) + ([] if barrier else outer)
                barrier, since = s, []
                continue
            implicit = [] if s.ignores_waits else ([Edge(barrier, False)] if barrier else list(outer))
            entry = explicit(s) + implicit
            if s.kind == "group":
                walk(s.children, entry)
                # Depending on a group means depending on every child.
                deps[id(s)] = [Edge(c, False) for c in s.children] or entry
            else:
                deps[id(s)] = entry
            since.append(s)

    walk(pipeline.top, [])
    order, cycle = _toposort(pipeline.steps, deps)
    if cycle:
        names = " -> ".join(c.key or c.index for c in cycle)
        problems.append((cycle[0], f"depends_on forms a cycle: {names}"))
    return Graph(deps=deps, order=order, problems=problems)


def _toposort(steps: list[Step], deps: dict[int, list[Edge]]):
    """Kahn's algorithm, taking the earliest step in the file whenever several are free."""
    pos = {id(s): i for i, s in enumerate(steps)}
    pending = {id(s): {id(e.dep) for e in deps.get(id(s), [])} for s in steps}
    done: set[int] = set()
    order: list[Step] = []
    while len(order) < len(steps):
        free = [s for s in steps if id(s) not in done and pending[id(s)] <= done]
        if not free:
            return order, _find_cycle(steps, deps, done)
        nxt = min(free, key=lambda s: pos[id(s)])
        order.append(nxt)
        done.add(id(nxt))
    return order, None


def _find_cycle(steps, deps, done) -> list[Step]:
    by_id = {id(s): s for s in steps}
    state: dict[int, int] = {}  # 1 = on the stack, 2 = finished
    stack: list[int] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for e in deps.get(n, []):
            m = id(e.dep)
            if m in done:
                continue
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for s in steps:
        if id(s) not in done and id(s) not in state:
            found = visit(id(s))
            if found:
                return [by_id[n] for n in found]
    return []
