"""Replayable counterexamples: the inputs on which a live PyTorch case's single-device and
distributed programs really differ, saved with a script that runs both again.

A finding's counterexample may be about an intermediate tensor, drawn by shardproof's own
numerics; what is saved here is a whole value set of the case (its data inputs and the
single-device program's parameters and buffers) on which *running* the programs -- the
single-device one in-process, the distributed one on a local gloo group, one process per
rank (:mod:`shardproof.frontends.torch_run`) -- gives outputs that differ beyond rounding.
The value sets tried: the case's own values, its weights as shardproof redraws them for the
capture (:data:`shardproof.api.REDRAW_SEED`), then fresh draws
(:mod:`shardproof.frontends.torch_draws`); a set on which the ranks' inputs do not hold the
relations the verification found (a case whose rank programs ignore a redraw) is not used.

Files written: ``inputs.npz`` (the data inputs), ``state.npz`` (parameters and buffers),
``counterexample.json`` (the case file, world size, expected output relations, dtypes) and
``replay.py``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch

from ..case import Case
from ..engine.replay import differs, output_gaps, relation_of, unrelated_inputs
from ..relations.spec import DERIVED, Ignore, Replicate
from .torch_draws import draw_inputs, redraw, restore, snapshot
from .torch_run import RunError, related_data, run_distributed, run_single

INPUTS, STATE, META, SCRIPT = "inputs.npz", "state.npz", "counterexample.json", "replay.py"
DRAWS = 3  # fresh draws tried after the case's own values and the capture's redraw


class NoDifference(Exception):
    """No value set tried made the programs differ when run."""


@dataclass
class Saved:
    """A counterexample as saved: the case file, world size, the value set and what the
    outputs are expected to hold (output name -> relation, in words)."""
    case_file: str
    world_size: int
    inputs: dict
    state: dict
    expected: dict
    relations: dict = field(default_factory=dict)  # rank input -> {relation, of} (report.relations)
    renames: dict = field(default_factory=dict)  # rank output -> single-device output (training steps)
    label: str = ""
    dtypes: dict = field(default_factory=dict)


def _to_numpy(values: dict, dtypes: dict) -> dict:
    out = {}
    for name, t in values.items():
        if isinstance(t, torch.Tensor):
            t = t.detach().cpu()
            dtypes[name] = str(t.dtype).replace("torch.", "")
            out[name] = (t.float() if t.dtype == torch.bfloat16 else t).numpy()  # numpy has no bfloat16
    return out


def _to_torch(values: dict, dtypes: dict) -> dict:
    return {k: torch.from_numpy(np.array(v)).to(getattr(torch, dtypes.get(k, str(v.dtype)))) for k, v in values.items()}


def apply(case: Case, saved: Saved) -> None:
    """Give `case` the saved value set: its data inputs and single-device weights (the rank
    programs are built from them by the case's own ``distributed(rank, world)``)."""
    case.inputs = {**case.inputs, **_to_torch(saved.inputs, saved.dtypes)}
    state = _to_torch(saved.state, saved.dtypes)
    restore(case.single, state)


def rank_data(case: Case, saved: Saved):
    """The ranks' data as the confirmation gives it: the case's ``dist_inputs``, or, for data
    every rank receives whole under a relation (a ``Partial`` input), the pieces it states."""
    if case.dist_inputs is not None:
        return None
    stated = {}
    for name, r in saved.relations.items():
        rel = relation_of(r["relation"])
        if name in case.inputs and r["of"] == name and rel is not None \
                and not isinstance(rel, (Replicate, Ignore, *DERIVED)):
            stated[name] = rel
    return related_data(stated) if stated else None


def run(case: Case, saved: Saved, timeout: float = 120.0):
    """Both programs on the saved values: (single inputs, outputs, rank inputs, rank outputs
    named as the single-device ones)."""
    s_in, s_out = run_single(case, None)
    ranks = run_distributed(case, saved.world_size, [None], timeout, rank_data(case, saved))
    r_in = [r[0][0] for r in ranks]
    r_out = [{saved.renames.get(k, k): v for k, v in r[0][1].items()} for r in ranks]
    return s_in, s_out, r_in, r_out


def compare(saved: Saved, s_in: dict, s_out: dict, r_out: list) -> tuple[dict, list]:
    """(per output (largest difference, tolerance), the outputs that differ); an updated
    parameter is judged against the size of its step."""
    bases = {name: s_in[name.split(":", 1)[1]] for name in s_out
             if name.startswith("updated:") and name.split(":", 1)[1] in s_in}
    gaps = output_gaps(saved.expected, s_out, r_out, bases)
    return gaps, differs(gaps)


SMALL = 1e-3
"""Data scaled down: where a bug is a constant that matters only against small values (an
epsilon), the difference shows beyond rounding."""


def _small(data: dict) -> dict:
    return {k: v * SMALL if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in data.items()}


def _value_sets(case: Case, redraw_seed: int):
    """(label, data inputs, weights) to try, each computed from the case as loaded."""
    own = snapshot(case.single)
    yield "the case's own values", dict(case.inputs), own
    yield f"the case's own weights, its data times {SMALL:g}", _small(case.inputs), own
    sets = [("the capture's redrawn weights", redraw_seed, None)] + [(f"draw {k}", k, k) for k in range(1, DRAWS + 1)]
    for label, weights_seed, data_seed in sets:
        redraw(case.single, weights_seed, buffers=False)  # buffers (rope tables, masks) are often rebuilt per rank
        state = snapshot(case.single)
        restore(case.single, own)
        yield label, draw_inputs(case.inputs, data_seed) if data_seed else dict(case.inputs), state


def training_renames(parameters: list) -> dict:
    """Training steps: rank outputs ``grad:<rank param>`` / ``updated:<rank param>`` named
    after the single-device parameter (``report.parameters`` rows "name (of single name)")."""
    out = {}
    for row in parameters:
        name, _, of = row["parameter"].partition(" (of ")
        if of:
            for prefix in ("grad:", "updated:"):
                out[prefix + name] = prefix + of.rstrip(")")
    return out


def find(case: Case, case_file: str, world: int, report, redraw_seed: int) -> Saved:
    """The first value set on which the programs differ when run (:class:`NoDifference`
    when none does)."""
    expected = {o.name: o.expected for o in report.outputs}
    tried = []
    for label, data, state in _value_sets(case, redraw_seed):
        dtypes: dict = {}
        saved = Saved(os.path.abspath(case_file), world, _to_numpy(data, dtypes), _to_numpy(state, dtypes), expected,
                      {k: {"relation": r["relation"], "of": r["of"]} for k, r in report.relations.items()},
                      training_renames(report.parameters), label, dtypes)
        original = (dict(case.inputs), snapshot(case.single))
        apply(case, saved)
        try:
            s_in, s_out, r_in, r_out = run(case, saved)
        except RunError as exc:
            tried.append(f"{label}: {exc}")
            continue
        finally:
            case.inputs = original[0]
            restore(case.single, original[1])
        off = unrelated_inputs(saved.relations, s_in, r_in)
        gaps, bad = compare(saved, s_in, s_out, r_out)
        if off is None and bad:
            return saved
        tried.append(f"{label}: " + (f"not used ({off})" if off else "the outputs agree"))
    raise NoDifference("no value set tried made the programs differ when run (" + "; ".join(tried) + ")")


SCRIPT_TEXT = '''"""Replay a shardproof counterexample: run the single-device program (in this process) and
the distributed one (a local gloo process group, one process per rank, CPU) of

    {case_file}

at world size {world_size} on the saved inputs and weights ({label}), and print how far
each output is from what the ranks should hold. Exit 1 when they differ, 0 when they agree.

    python replay.py
"""
import os
import sys

from shardproof.frontends import torch_replay
from shardproof.frontends.torch_run import run_distributed, run_single
from shardproof.testing import load_case

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    saved = torch_replay.load(HERE)  # inputs.npz, state.npz, counterexample.json
    case = load_case(saved.case_file, saved.world_size)
    torch_replay.apply(case, saved)  # the saved data inputs and single-device weights
    single_inputs, single = run_single(case, None)
    ranks = run_distributed(case, saved.world_size, [None], rank_data=torch_replay.rank_data(case, saved))
    distributed = [{{saved.renames.get(k, k): v for k, v in r[0][1].items()}} for r in ranks]
    gaps, differ = torch_replay.compare(saved, single_inputs, single, distributed)
    for name, (gap, tol) in gaps.items():
        print(f"{{name}}: max |distributed - single-device| = {{gap:.6g}}  (tolerance {{tol:.3g}})"
              + ("  DIFFERS" if name in differ else ""))
    worst = max((g for g, _ in gaps.values()), default=0.0)
    print(f"max difference: {{worst:.6g}}; " + ("the programs differ" if differ else "the programs agree"))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def write(saved: Saved, directory: str) -> str:
    """Write the value set, its description and ``replay.py`` into `directory`; returns the script's path."""
    os.makedirs(directory, exist_ok=True)
    np.savez(os.path.join(directory, INPUTS), **saved.inputs)
    np.savez(os.path.join(directory, STATE), **saved.state)
    meta = {k: getattr(saved, k) for k in ("case_file", "world_size", "expected", "relations", "renames", "label",
                                           "dtypes")}
    with open(os.path.join(directory, META), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
    script = os.path.join(directory, SCRIPT)
    with open(script, "w", encoding="utf-8") as f:
        f.write(SCRIPT_TEXT.format(case_file=saved.case_file, world_size=saved.world_size, label=saved.label))
    return script


def load(directory: str) -> Saved:
    """A counterexample :func:`write` saved."""
    with open(os.path.join(directory, META), encoding="utf-8") as f:
        meta: dict[str, Any] = json.load(f)
    arrays = []
    for name in (INPUTS, STATE):
        with np.load(os.path.join(directory, name), allow_pickle=False) as z:
            arrays.append({k: z[k] for k in z.files})
    return Saved(meta["case_file"], meta["world_size"], arrays[0], arrays[1], meta["expected"], meta["relations"],
                 meta["renames"], meta["label"], meta["dtypes"])


def save(case: Case, case_file: str, world: int, report, directory: str, redraw_seed: int) -> Optional[str]:
    """Find a value set on which the programs differ and save it with ``replay.py``."""
    return write(find(case, case_file, world, report, redraw_seed), directory)
