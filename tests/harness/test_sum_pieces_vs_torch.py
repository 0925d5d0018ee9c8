"""Soundness of ``algebra/sum_pieces.py``, with torch as the judge: complementary partial sums,
each carried through the same linear map and then concatenated, viewed and summed over the dim
that indexes them (a repeated KV head's gradient under Ulysses: each rank's partial over its own
query heads, RoPE's backward, the all_to_all, the repeat's backward), build the term of the map
of each group's whole sum -- the one the direct spelling (each group's heads summed at once,
then mapped) builds -- and every value the rules claim on
the way holds torch's value (``Claims``: a term claimed by two spellings must hold one value).

Drawn: world size and the input's split (every rank runs the chain on its rows), batch, groups,
pieces per group and heads per piece, sequence and head dims, seed. Adversarial twins, each
still torch-checked claim by claim, must NOT reach the whole's term: another piece's table (the
linear map differs across the pieces summed), a partial summed twice, pieces of two groups
summed together (completed over the wrong subgroup)."""
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from shardproof.algebra.layout import same_vec
from shardproof.algebra.terms import TermStore
from shardproof.relations.spec import Replicate, Shard

from .core import Claims, Draw, T, apply_rule, examples, local_inputs, run_torch, to_np
from .term_values import check_terms

SETTINGS = settings(max_examples=examples(25), deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate])
A = "aten."
TWINS = ("correct", "other_table", "summed_twice", "wrong_subgroup")


def _steps(groups: int, m: int, k: int, twin: str) -> tuple[list, int, int]:
    """(steps, index of the pieces' sum, index of the direct spelling): x (B, groups*m*k, S, D)."""
    steps, pieces = [], []
    order = [(g, j) for g in range(groups) for j in range(m)]
    if twin == "wrong_subgroup":  # pieces interleaved across groups: the view groups them wrongly
        order = [(g, j) for j in range(m) for g in range(groups)]
    for g, j in order:
        src = j - 1 if twin == "summed_twice" and j == m - 1 and g == 0 else j  # one partial twice
        lo = (g * m + src) * k
        table = "c2" if twin == "other_table" and (g, j) == (0, m - 1) else "c"
        at = len(steps)
        steps += [(A + "slice", lambda s, lo=lo: ((T("x"), 1, lo, lo + k), {})),
                  (A + "sum", lambda s, at=at: ((T(f"s{at}"), [1], True), {})),
                  (A + "mul", lambda s, at=at, table=table: ((T(f"s{at + 1}"), T(table)), {}))]
        pieces.append(f"s{at + 2}")
    cat = len(steps)
    steps += [(A + "cat", lambda s: (([T(p) for p in pieces], 1), {})),
              (A + "reshape", lambda s: ((T(f"s{cat}"), [s["x"][0], groups, m, s["x"][2], s["x"][3]]), {})),
              (A + "sum", lambda s: ((T(f"s{cat + 1}"), [2]), {}))]
    summed = cat + 2
    wholes = []  # each group's heads summed at once, then mapped: the single device's spelling
    for g in range(groups):
        at = len(steps)
        steps += [(A + "slice", lambda s, g=g: ((T("x"), 1, g * m * k, (g + 1) * m * k), {})),
                  (A + "sum", lambda s, at=at: ((T(f"s{at}"), [1], True), {})),
                  (A + "mul", lambda s, at=at: ((T(f"s{at + 1}"), T("c")), {}))]
        wholes.append(f"s{at + 2}")
    steps.append((A + "cat", lambda s: (([T(w) for w in wholes], 1), {})))
    return steps, summed, len(steps) - 1


def run_pieces(inputs: dict, layouts: dict, world: int, groups: int, m: int, k: int, twin: str, seed: int = 0):
    """Every program (single device, each rank) runs the chain; every output is claimed against
    torch's. Returns, per program, whether the pieces' sum is the direct spelling's value (term
    and selection)."""
    steps, summed, direct = _steps(groups, m, k, twin)
    terms = TermStore()
    seq, ranks = local_inputs(Draw("pieces", inputs, ()), layouts, world, terms, seed)
    envs = [(dict(inputs), dict(seq))] + [(dict(t), dict(v)) for t, v in ranks]
    claims = Claims(terms, 1e-9 * (1 + max(float(v.abs().max()) for v in inputs.values())) ** 3 * 64)
    met = []
    try:
        for who, (tens, vals) in enumerate(envs):
            for i, (op, build) in enumerate(steps):
                args, kwargs = build({n: tuple(v.shape) for n, v in tens.items()})
                d = Draw(op, inputs, ())
                out = run_torch(d, tens, args, kwargs)
                got = apply_rule(d, terms, vals, tens, args, kwargs, out, max(who - 1, 0), 1 if who == 0 else world)
                got = got[0] if isinstance(got, (list, tuple)) else got
                claims.add(got, to_np(out), f"step {i} ({op}) of {'single' if who == 0 else f'rank {who - 1}'}")
                tens[f"s{i}"], vals[f"s{i}"] = out, got
            a, b = vals[f"s{summed}"], vals[f"s{direct}"]
            met.append(a.t == b.t and all(same_vec(x, y) for x, y in zip(a.vecs, b.vecs)))
    finally:  # every claimed term against its own value where the harness can compute it
        check_terms(claims, {n: to_np(v) for n, v in inputs.items()})
    return met


@settings(SETTINGS)
@given(st.data())
def test_pieces_through_one_map_complete_torch_agrees(data):
    draw = data.draw
    world = draw(st.sampled_from([2, 3, 4]))
    groups, m, k = draw(st.integers(1, 2)), draw(st.integers(2, 3)), draw(st.integers(1, 2))
    split = draw(st.sampled_from(["rows", "whole"]))
    b = (world if split == "rows" else 1) * draw(st.integers(1, 2))
    s, d = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    twin = draw(st.sampled_from(TWINS))
    g = torch.Generator().manual_seed(draw(st.integers(0, 99)))
    x = torch.randn(b, groups * m * k, s, d, generator=g, dtype=torch.float64)
    c, c2 = (torch.randn(s, d, generator=g, dtype=torch.float64) for _ in range(2))
    lay = {"x": Shard(0) if split == "rows" else Replicate(), "c": Replicate(), "c2": Replicate()}
    met = run_pieces({"x": x, "c": c, "c2": c2}, lay, world, groups, m, k, twin)
    if twin == "correct":
        assert all(met), met  # the normal form is reached on every program
    elif not (twin == "wrong_subgroup" and groups == 1):  # one group: the interleaving is the same order
        assert not any(met), (twin, met)


def test_each_twin_is_not_the_whole():
    """Fixed shapes (2 groups, 2 pieces of 2 heads, world 2, rows split): the correct chain
    meets the whole on every program, each twin on none."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 8, 3, 2, generator=g, dtype=torch.float64)
    c, c2 = (torch.randn(3, 2, generator=g, dtype=torch.float64) for _ in range(2))
    lay = {"x": Shard(0), "c": Replicate(), "c2": Replicate()}
    for twin in TWINS:
        met = run_pieces({"x": x, "c": c, "c2": c2}, lay, 2, 2, 2, 2, twin)
        assert met == [twin == "correct"] * 3, (twin, met)
