"""One end-to-end verification of a whole parallel training plan, composed of stages
(issue 16: the 405B-like plan in minutes).

    report = verify_plan([Stage(...), Stage(...)], name="plan")

A plan too large to trace whole is verified in **stages**, each an existing verification
whose claim is stated exactly:

- the layer stack by block contracts at the plan's real sizes, on fake tensors, from stated
  relations, confirmed by execution at reduced widths with the structural match checked
  (:func:`shardproof.blocks_shapes.verify_blocks_at_shapes`);
- the training step (loss, microbatch accumulation, the dp and tp gradient reductions,
  clipping, the optimizer) at the plan's parallelism (dp, tp, microbatches: every rank, rank
  classes and derived microbatch loops as ``prepare`` builds them), proved by the engine, and
  confirmed by execution on gloo at the plan's world or, where that many processes cannot run
  here, at a smaller dp (:func:`step_stage`).

Each stage says what it covers (``covers``), at which sizes it was proved (``proved``) and at
which it was executed (``confirmed``): whatever is only confirmed at reduced sizes says so in
the report (``report.plan``), and nothing is proved at a size other than the one stated.
The plan's verdict: ``violation`` at the first stage that finds one (its findings, with the
layer / rank / microbatch they carry, and ``reason`` naming the stage); else ``unknown`` at the
first stage not verified (named); ``verified`` only when every stage is. A stage that raises
is ``unknown`` with the exception named, never skipped. What no stage covers is listed in
``report.plan["not_covered"]``.

Later scaling work plugs in per stage (a cheaper tail per layer class, a flat dp or
microbatch proof): the stages are callables returning a report; this module only composes."""
from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from .engine.result import Report

__all__ = ["Stage", "verify_plan", "step_stage", "machinery"]


@dataclass
class Stage:
    """One part of the plan: `run()` returns its report; `covers` what of the plan it is
    about, `proved` the sizes / parallelism its proof ran at, `confirmed` where it was
    executed (fill in after the run with `confirmed_of(report)` when it depends on it)."""
    name: str
    covers: str
    proved: str
    confirmed: str
    run: Callable[[], Report]
    confirmed_of: Callable[[Report], str] | None = None
    extra: dict = field(default_factory=dict)


def _rss_mb() -> tuple[int, int]:
    """Peak RSS of this process and of the largest child process so far, in MB."""
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)


def machinery(report: Report) -> dict:
    """How flat in dp and microbatches the stage's proof was, read from its report: rank
    classes (ranks, classes), the ranks proved with their batch block as a parameter
    (engine/parametric.py), the microbatches concluded by induction (engine/induction.py),
    and the step tail's update classes (step_tail.py)."""
    stats = report.stats or {}
    induced = stats.get("microbatch_induction") or {}
    parametric = ((stats.get("class_proof") or {}).get("parametric") or {}).get("ranks") or []
    out = {"ranks": report.world_size, "rank_classes": len(report.rank_classes or []),
           "parametric_ranks": len(parametric), "by_induction": list(induced.get("by_induction") or []),
           "checked": list(induced.get("checked") or [])}
    updates = (report.blocks or {}).get("updates") or []
    if updates:
        out.update(update_classes=len(updates), updated_parameters=sum(u["parameters"] for u in updates))
    return out


def _entry(stage: Stage, report: Report, wall: float, cpu: float) -> dict:
    peak, child = _rss_mb()
    return {"stage": stage.name, "covers": stage.covers, "proved": stage.proved,
            "confirmed": stage.confirmed_of(report) if stage.confirmed_of else stage.confirmed,
            "status": report.status, "reason": report.reason or "", "wall_seconds": round(wall, 2),
            "cpu_seconds": round(cpu, 2), "peak_rss_mb": peak, "peak_child_rss_mb": child,
            "machinery": machinery(report), **stage.extra}


def _failed(stage: Stage, exc: Exception) -> Report:
    return Report("unknown", 0, reason=f"stage {stage.name} could not run: {type(exc).__name__}: {exc}",
                  name=stage.name)


def verify_plan(stages: list[Stage], name: str = "plan", world_size: int = 0, not_covered: list[str] | None = None,
                stop_at_violation: bool = True, on_stage: Callable[[dict], None] | None = None) -> Report:
    """Run every stage in order and compose their verdicts (module docstring). With
    `stop_at_violation` the stages after the first violation are not run (listed as such);
    `on_stage(entry)` is called as each stage ends (progress)."""
    t0 = time.perf_counter()
    entries, ran = [], []  # ran: (entry, report) of the stages that ran
    for stage in stages:
        if stop_at_violation and ran and ran[-1][1].status == "violation":
            entries.append({"stage": stage.name, "covers": stage.covers, "proved": stage.proved,
                            "confirmed": stage.confirmed, "status": "not run",
                            "reason": f"not run: stage {ran[-1][0]['stage']} found a violation"})
            continue
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            report = stage.run()
        except Exception as exc:  # noqa: BLE001  (a stage that cannot run is unknown, named: never skipped)
            report = _failed(stage, exc)
        entries.append(_entry(stage, report, time.perf_counter() - w0, time.process_time() - c0))
        ran.append((entries[-1], report))
        if on_stage is not None:
            on_stage(entries[-1])
    bad = next(((e, r) for e, r in ran if r.status == "violation"), None) or \
        next(((e, r) for e, r in ran if r.status != "verified"), None)
    if bad is None and not ran:
        bad = ({"stage": "-", "covers": "nothing"}, Report("unknown", world_size, reason="no stages"))
    entry, base = bad or ran[-1]
    statement = "; ".join(f"{e['stage']}: {e['status']}, proved at {e['proved']}, confirmed {e['confirmed']}"
                          for e in entries)
    peak, child = _rss_mb()
    plan = {"stages": entries, "statement": statement, "not_covered": list(not_covered or []),
            "decided_by": entry["stage"], "wall_seconds": round(time.perf_counter() - t0, 2), "peak_rss_mb": peak,
            "peak_child_rss_mb": child}
    reason = f"stage {entry['stage']} ({entry['covers']}): {base.reason or base.status}" if bad else ""
    report = replace(base, reason=reason, name=name, world_size=world_size or base.world_size, plan=plan,
                     stats=dict(base.stats, wall_seconds=plan["wall_seconds"]))
    if bad is None:  # every stage verified: the weakest strength
        report.strength = min((r.strength for _, r in ran), key=_strength_rank)
    return report


_STRENGTHS = ("local", "proof")


def _strength_rank(strength: str) -> int:
    return _STRENGTHS.index(strength) if strength in _STRENGTHS else len(_STRENGTHS)


def _traced(case, confirm_draws):
    """The whole program traced and proved by the engine (``prepare`` + ``verify_prepared``)."""
    from .api import prepare, verify_prepared
    return verify_prepared(prepare(case, case.world_size), confirm_draws=confirm_draws, fixes=False)


def step_stage(case, confirm_case=None, confirm_draws: int | None = None,
               verify: Callable | None = None) -> Report:
    """The training step of `case` at its own world, proved by `verify(case, confirm_draws)`
    (default: the engine on the whole trace, rank classes and derived microbatch loops as
    ``prepare`` builds them; e.g. ``step_blocks.verify_step``). Confirmed by execution on gloo
    at the same world when `confirm_case` is None; else the proof stays unconfirmed at this
    world and `confirm_case` (the same step at a smaller dp, or with fewer layers) is verified
    the same way and executed instead: the step's verdict is then ``verified`` only if both
    hold, and the confirmation's detail names the program it ran."""
    from .api import NO_CONFIRM
    verify = verify or _traced
    report = verify(case, NO_CONFIRM if confirm_case else confirm_draws)
    if confirm_case is None or report.status == "violation" or not (report.reason or "").startswith(
            "proved, but not confirmed"):
        return report
    small = verify(confirm_case, confirm_draws)
    where = f"at world {confirm_case.world_size} ({confirm_case.name})"
    if small.status != "verified":
        return replace(small, reason=f"proved at world {case.world_size}; at world {confirm_case.world_size}: "
                                     f"{small.status}" + (f": {small.reason}" if small.reason else ""))
    detail = f"{where}; the proof ran at world {case.world_size}" + (
        f" ({case.name})" if case.name != confirm_case.name else "")
    return replace(report, status="verified", reason="", strength=small.strength,
                   confirmation=replace(small.confirmation, detail=detail))
