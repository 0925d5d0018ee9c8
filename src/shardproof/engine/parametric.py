"""A dp rank class proved once, with the member's batch block as a parameter (issue 16).

The members of a class (frontends/rank_classes.py) run one graph (up to their collectives'
groups). A member m is *parametric* when its inputs are the representative's with the batch
rows permuted: there is one permutation ``pi`` of the rows of the single-device batch
tensors (the input leaves whose layouts differ between m and the representative, all along
one dim of one extent B) such that every input of m holds ``Val(t, pi . L)`` where the
representative holds ``Val(t, L)`` (``pi . L``: the layout with its batch-dim positions
mapped through ``pi``; every other input identical). With ``P`` the permutation of those
leaves' rows, m's inputs are then exactly the representative's inputs evaluated at ``PX``.

Why a member's value is the representative's, re-indexed (soundness). The representative's
proof says of each of its nodes ``value = T(X)[L]`` *for all* single-device inputs X. A
member's node runs the same op with the same arguments on its operands; if those operands
are the representative's operands evaluated at PX (true of the inputs, by the check above,
and inductively of every derived value), the member's value is the representative's value
at PX: ``T(PX)[L]``. :func:`action` classifies the term T structurally, from the meaning of
its term ops alone (never from a rule): *invariant* (``T(PX) = T(X)``: parameters, sums
over all batch rows, everything after the dp all_reduce) or *row-equivariant* along dim d
in blocks of s (``T(PX) = P_d T(X)``: position i of dim d belongs to batch row i // s, as in
activations and per-row gradients). Then ``T(PX)[L] = T(X)[pi . L]``: the member's relation
is the representative's with the batch positions mapped, built without running a rule.
Anything else -- a term op not in the table, a partial sum over the member's own rows (a
``dot`` or ``sum`` over a selection), a rule that read the rank or failed, an operand that is
not such a re-indexing (a collective's result that is not, a value the member interpreted
itself with another term) -- is interpreted per member as before (engine/classes.py), so
nothing is taken on trust. Collectives are evaluated from every member's actual values:
the dp all_reduce of the members' partial gradients sums all members' blocks.

A member whose inputs are not a re-indexing (another rank's chunk: no single permutation
maps the blocks; a rank-specific constant: another class) is proved per member, as before.
"""
from __future__ import annotations

import numpy as np

from ..algebra.layout_base import Val, canon_vec, same_vec
from ..ir.graph import DistributedProgram

PARAMETRIC = True  # prove dp class members by re-indexing the representative's relations

INV = ("inv",)
_RANDOM = {"bernoulli", "dropout", "dropout_mask", "ones_mask"}  # a draw per call: not a function of X alone
_LEAVES = {"input", "fill", "const", "shared_const"}
_ACROSS = ("batch_norm",)  # built elementwise, but their statistics may come from other rows: never re-indexed


def _has_bytes(x) -> bool:
    if isinstance(x, (bytes, np.ndarray)):
        return True
    return isinstance(x, tuple) and any(_has_bytes(a) for a in x)


class Actions:
    """How a row permutation P of the batch leaves acts on terms, memoized per term:
    INV, ``("row", d, s)`` or None (unknown: never re-indexed)."""

    def __init__(self, terms, leaves: dict[int, int], batch: int):
        self.terms, self.leaves, self.batch = terms, leaves, batch
        self.memo: dict[int, tuple | None] = {}

    def __call__(self, t: int):
        hit = self.memo.get(t, False)
        if hit is not False:
            return hit
        stack = [(t, False)]
        while stack:  # children first (post-order), without recursion (terms can be deep)
            x, ready = stack.pop()
            if x in self.memo:
                continue
            if ready:
                self.memo[x] = self._one(x)
                continue
            stack.append((x, True))
            stack.extend((c, False) for c in self.terms[x].children if c not in self.memo)
        return self.memo[t]

    def _row(self, d: int, s: int, shape) -> tuple | None:
        return ("row", d, s) if s > 0 and shape[d] == self.batch * s else None

    def _one(self, t: int):
        term = self.terms[t]
        op, kids, shape = term.op, term.children, term.shape
        if not kids:
            if t in self.leaves:
                return self._row(self.leaves[t], 1, shape)
            return INV if op in _LEAVES else None
        acts = [self.memo[c] for c in kids]
        if any(a is None for a in acts) or op in _RANDOM:
            return None
        if all(a is INV for a in acts):
            return INV
        if any(a[0] == "new" for a in acts):  # T(PX) = op(c'(X), ...): the same op of the rewritten operands
            return None if any(a[0] == "row" for a in acts) else ("new", ("op",))
        # lin: the normal form of add/sub/scale (lemmas._merge), broadcast as those elementwise ops are
        if (op in self.terms.elementwise_ops and not op.startswith(_ACROSS)) or op == "lin":
            return None if _has_bytes(term.attrs) else self._elementwise(kids, acts, shape)
        if op == "permute":
            (_, d, s), perm = acts[0], list(term.attrs[0])
            return self._row(perm.index(d), s, shape)
        if op == "reshape":
            return self._reshape(self.terms.shape(kids[0]), acts[0], shape)
        if op == "gather":
            if len(kids) != 1 or len(term.attrs) != len(shape):
                return None
            _, d, s = acts[0]
            return self._row(d, s, shape) if term.attrs[d] is None else None
        if op in self.terms.reduction_ops and op == "sum":
            return self._sum(term.attrs, acts[0], kids[0], shape)
        if op == "dot":
            return self._dot(term.attrs, kids, acts, shape)
        if op == "cat":  # pieces along another dim; a uniform piece (a fill) is the same in every row
            rows = {a for a, c in zip(acts, kids) if not (a is INV and self._uniform(c))}
            if len(term.attrs) != 1 or len(rows) != 1 or INV in rows or next(iter(rows))[1] == term.attrs[0]:
                return None
            return next(iter(rows))
        if op in ("sdpa", "sdpa_backward"):  # batched over dim 0 of every operand and result
            if _has_bytes(term.attrs):
                return None
            rows = {a for a in acts if a is not INV}
            if len(rows) != 1 or next(iter(rows))[1] != 0:
                return None
            if any(a is INV and self.terms.shape(c)[:1] not in ((), (1,)) for a, c in zip(acts, kids)):
                return None
            return self._row(0, next(iter(rows))[2], shape)
        return None

    def _uniform(self, t: int) -> bool:
        """Every element the same number (a fill): equal to itself permuted along any dim."""
        return self.terms[t].op == "fill" and not self.terms[t].children

    def _elementwise(self, kids, acts, shape):
        n, out = len(shape), set()
        for c, a in zip(kids, acts):
            cs = self.terms.shape(c)
            if a is not INV:
                od = a[1] + n - len(cs)
                if od < 0 or cs[a[1]] != shape[od]:
                    return None
                out.add((od, a[2]))
        if len(out) != 1:
            return None
        od, s = next(iter(out))
        for c, a in zip(kids, acts):  # an invariant operand must not vary along the batch dim
            cs = self.terms.shape(c)
            k = od - (n - len(cs))
            if a is INV and k >= 0 and cs[k] != 1 and not self._uniform(c):
                return None
        return self._row(od, s, shape)

    def _reshape(self, src, act, shape):
        _, d, s = act
        inner = int(np.prod(src[d + 1:], dtype=np.int64))
        block, outer = s * inner, int(np.prod(src[:d], dtype=np.int64))
        for k in range(len(shape)):
            inner_k = int(np.prod(shape[k + 1:], dtype=np.int64))
            if inner_k and block % inner_k == 0 and int(np.prod(shape[:k], dtype=np.int64)) == outer:
                s_k = block // inner_k
                if shape[k] == self.batch * s_k:
                    return ("row", k, s_k)
        return None

    def _sum(self, attrs, act, kid, shape):
        dims, keepdim = attrs[0], attrs[1]
        if len(attrs) != 3:
            return None
        _, d, s = act
        if d in dims:  # a sum over every batch row, in any order; over a selection: the rows mapped
            k = list(dims).index(d)
            if attrs[2] is None or attrs[2][k] is None:
                return INV
            return ("new", ("sum", k, s))
        return self._row(d if keepdim else d - sum(1 for x in dims if x < d), s, shape)

    def _dot(self, attrs, kids, acts, shape):
        spec, over = attrs  # over: the index pairs each contracted dim sums (None: every (i, i))
        if len(spec) != 4:
            return None
        lb, rb, lc, rc = spec
        a, b = acts
        ra, rb_ = self.terms.shape(kids[0]), self.terms.shape(kids[1])
        lfree = [x for x in range(len(ra)) if x not in lb and x not in lc]
        rfree = [x for x in range(len(rb_)) if x not in rb and x not in rc]
        if a is not INV and b is not INV:
            if a[2] != b[2]:
                return None
            for k, (i, j) in enumerate(zip(lc, rc)):  # contracted on both sides: every pair (i, i) ...
                if (i, j) == (a[1], b[1]):
                    if over is None or over[k] is None:
                        return INV
                    return ("new", ("dot", k, a[2]))  # ... or a set of pairs: rows mapped (Permuted)
            for k, (i, j) in enumerate(zip(lb, rb)):
                if (i, j) == (a[1], b[1]):
                    return self._row(k, a[2], shape)
            return None
        if a is not INV and a[1] in lfree:
            return self._row(len(lb) + lfree.index(a[1]), a[2], shape)
        if b is not INV and b[1] in rfree:
            return self._row(len(lb) + len(lfree) + rfree.index(b[1]), b[2], shape)
        return None


class Permuted:
    """The action of one permutation ``pi`` (row i of the source member's batch is row pi[i]
    of the target's): :class:`Actions`' classes, with the terms a partial sum over selected
    rows becomes (``("new", t')``: ``T(PX) = t'(X)``) built for this permutation."""

    def __init__(self, actions: Actions, pi: np.ndarray):
        self.actions, self.terms, self.pi = actions, actions.terms, pi
        self.memo: dict[int, int | None] = {}

    def __call__(self, t: int):
        act = self.actions(t)
        if act is None or act is INV or act[0] == "row":
            return act
        new = self._new(t)
        return None if new is None else ("new", new)

    def _new(self, t: int):
        if t in self.memo:
            return self.memo[t]
        term, recipe = self.terms[t], self.actions(t)[1]
        out = None
        if recipe[0] == "sum":
            _, k, s = recipe
            over = term.attrs[2]
            rows = self._rows(np.frombuffer(over[k], dtype=np.int64), s)
            over = over[:k] + (np.sort(rows).tobytes(),) + over[k + 1:]
            out = self.terms.make("sum", term.attrs[:2] + (over,), term.children, term.shape)
        elif recipe[0] == "dot":
            _, k, s = recipe
            spec, over = term.attrs
            pairs = self._rows(np.frombuffer(over[k], dtype=np.int64).reshape(-1, 2), s)
            pairs = np.ascontiguousarray(pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))])  # as compute.pair_set
            out = self.terms.make("dot", (spec, over[:k] + (pairs.tobytes(),) + over[k + 1:]), term.children, term.shape)
        else:
            kids = [c if self.actions(c) is INV else self._new(c) for c in term.children]
            out = None if any(k is None for k in kids) else self._rebuilt(term, kids)
        self.memo[t] = out
        return out

    def _rows(self, positions: np.ndarray, s: int) -> np.ndarray:
        """Positions of a dim whose position i is batch row i // s, with the rows permuted."""
        return self.pi[positions // s] * s + positions % s

    def _rebuilt(self, term, kids: list) -> int:
        if term.op == "lin":  # its normal form (children sorted, coefficients with them)
            from ..algebra.lemmas import linear
            parts: dict = {}
            for k, c in zip(kids, term.attrs):
                parts[k] = parts.get(k, 0) + c
            return linear(self.terms, parts, term.shape)  # None: it cancels (not re-indexed)
        return self.terms.make(term.op, term.attrs, tuple(kids), term.shape)


def _vec(v, size):
    return np.arange(size, dtype=np.int64) if v is None else v


class Parametric:
    """Per class member: its permutation of the batch rows (relative to the representative),
    and which of its values are re-indexings of another member's (module doc). A member
    derives a node from the lowest member of its class that has already reached it (ranks of
    other tp groups can run ahead of the representative between collectives): with
    ``pi_a``, ``pi_r`` the members' permutations, r's inputs are a's at ``pi_r . pi_a^-1``."""

    def __init__(self, dist: DistributedProgram, terms):
        self.terms, self.dist = terms, dist
        self.rep = {r: c["ranks"][0] for c in (dist.classes or []) if len(c.get("ranks") or []) > 1
                    and c.get("derived") for r in c["ranks"]}
        self.ranks_of = {c["ranks"][0]: list(c["ranks"]) for c in (dist.classes or []) if c["ranks"][0] in self.rep}
        self.names: dict[int, dict] = {}  # rank -> node name -> node
        self.envs: dict[int, dict] = {}  # class member -> its environment (live)
        self.member: dict[int, tuple | None] = {}  # member -> (leaves, pi) relative to the representative, or None
        self.pairs: dict[tuple, Permuted] = {}
        self.kinds: dict[tuple, Actions] = {}  # batch leaves -> how a permutation of their rows acts  # (from, to) -> the action of the permutation between them
        self.related: dict[tuple, bool] = {}  # (member, node name, from) -> its value is from's re-indexed
        self.derived = [0] * len(dist.graphs)
        self.block: dict[int, int | None] = {}  # member -> its block index relative to the representative

    def see(self, rank: int, env: dict) -> None:
        if rank in self.rep and rank not in self.envs:
            self.envs[rank] = env
            self.names[rank] = {n.name: n for n in self.dist.graphs[rank].nodes}
            if self.rep[rank] == rank:
                self.member[rank] = ({}, None)

    def _value(self, rank: int, name: str):
        node = self.names[rank].get(name)
        env = self.envs.get(rank)
        if node is None or env is None or node not in env:
            return None, False
        return env[node], True

    def _setup(self, rank: int, env: dict):
        """The member's permutation of the batch rows, or None (not a re-indexing)."""
        rep = self.rep[rank]
        pairs, leaves = [], {}
        inputs = [n for n in env if n.op == "input"]
        for node in inputs:
            mv = env[node]
            rv, ok = self._value(rep, node.name)
            if not ok:
                return None
            if not (isinstance(mv, Val) and isinstance(rv, Val)):
                continue  # checked below, like every input
            if mv.t != rv.t or len(mv.vecs) != len(rv.vecs):
                return None
            ts = self.terms.shape(mv.t)
            diff = [d for d in range(len(ts)) if not same_vec(mv.vecs[d], rv.vecs[d])]
            if len(diff) > 1 or (diff and self.terms[mv.t].op != "input"):
                return None
            for d in diff:
                if leaves.setdefault(mv.t, d) != d:
                    return None
                a, b = _vec(rv.vecs[d], ts[d]), _vec(mv.vecs[d], ts[d])
                if len(a) != len(b):
                    return None
                pairs.append((a, b, ts[d]))
        if not leaves:
            return None  # nothing batch-dependent differs: the class memo shares it all
        sizes = {p[2] for p in pairs}
        if len(sizes) != 1:
            return None
        batch = sizes.pop()
        pi = np.full(batch, -1, dtype=np.int64)
        for a, b, _ in pairs:
            if (pi[a] >= 0).any() and not np.array_equal(pi[a][pi[a] >= 0], b[pi[a] >= 0]):
                return None
            pi[a] = b
        used = np.zeros(batch, dtype=bool)
        used[pi[pi >= 0]] = True
        if used.sum() != (pi >= 0).sum():
            return None  # two rows onto one: not a permutation (a duplicated block)
        pi[pi < 0] = np.flatnonzero(~used)  # any bijection on the rows no input holds
        self.member[rank] = (leaves, pi)  # provisional, for the input check
        if not all(self._is_image(rank, node, env, rep) for node in inputs):
            return None
        first = pairs[0][0]
        moved, step = pi[first] - first, len(first)
        self.block[rank] = int(moved[0] // step) if len(set(moved.tolist())) == 1 and moved[0] % step == 0 else None
        return leaves, pi

    def _actions(self, a: int, r: int) -> Permuted | None:
        hit = self.pairs.get((a, r), False)
        if hit is False:
            (la, pa), (lr, pr) = self.member[a], self.member[r]
            hit = None
            if not la or la == lr:  # the representative's leaves are any member's
                pi = pr.copy() if pa is None else np.empty_like(pr)
                if pa is not None:
                    pi[pa] = pr  # a's row pa[i] is r's row pr[i]
                key = tuple(sorted(lr.items()))
                if key not in self.kinds:
                    self.kinds[key] = Actions(self.terms, lr, len(pr))
                hit = Permuted(self.kinds[key], pi)
            self.pairs[(a, r)] = hit
        return hit

    def image(self, acts: Permuted, value):
        """A value re-indexed by the permutation `acts` acts by; None where not known."""
        if isinstance(value, (tuple, list)):
            out = [self.image(acts, v) for v in value]
            return None if any(o is None and v is not None for o, v in zip(out, value)) else type(value)(out)
        if not isinstance(value, Val):
            return value if value is None or isinstance(value, (bool, int, float, str)) else None
        act = acts(value.t)
        if act is None:
            return None
        if act is INV:
            return value
        if act[0] == "new":  # no dim of the term is a batch dim any more: the layout stays
            return Val(act[1], value.vecs)
        _, d, s = act
        size = self.terms.shape(value.t)[d]
        vecs = list(value.vecs)
        vecs[d] = canon_vec(acts._rows(_vec(value.vecs[d], size), s), size)
        return Val(value.t, tuple(vecs))

    def _same(self, a, b) -> bool:
        if isinstance(a, Val) and isinstance(b, Val):
            return a.t == b.t and all(same_vec(_vec(x, n), _vec(y, n))
                                      for x, y, n in zip(a.vecs, b.vecs, self.terms.shape(a.t)))
        if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
            return len(a) == len(b) and all(self._same(x, y) for x, y in zip(a, b))
        return a is None and b is None or (type(a) is type(b) and isinstance(a, (bool, int, float, str)) and a == b)

    def _is_image(self, rank: int, node, env: dict, a: int) -> bool:
        key = (rank, node.name, a)
        hit = self.related.get(key)
        if hit is None:
            av, ok = self._value(a, node.name)
            acts = self._actions(a, rank) if ok else None
            img = self.image(acts, av) if acts is not None else None
            hit = self.related[key] = img is not None and self._same(env[node], img)
        return hit

    def source(self, rank: int, name: str) -> int | None:
        """The member `rank` would derive node `name` from: the lowest parametric member of its
        class (not itself) that has reached it."""
        if rank not in self.rep or self.rep[rank] == rank:
            return None
        if rank not in self.member:
            self.member[rank] = None
            self.member[rank] = self._setup(rank, self.envs[rank])
        if self.member[rank] is None:
            return None
        for a in self.ranks_of[self.rep[rank]]:
            if a != rank and self.member.get(a) is not None and self._value(a, name)[1]:
                return a
        return None

    def derive(self, rank: int, node, inputs, env: dict, a: int):
        """The member's value of a local `node` (operands `inputs`) as member `a`'s re-indexed, or
        None (interpret it). The caller has checked that `a`'s node is this one and its rule did
        not read the rank."""
        if not all(self._is_image(rank, x, env, a) for x in inputs):
            return None
        acts = self._actions(a, rank)
        out = self.image(acts, self._value(a, node.name)[0]) if acts is not None else None
        if out is None:
            return None
        self.related[(rank, node.name, a)] = True
        self.derived[rank] += 1
        return out

    def ranks(self) -> dict:
        """Members proved by re-indexing: rank -> its block index (None: a permutation that is
        not a block shift)."""
        return {r: self.block.get(r) for r, m in sorted(self.member.items()) if m is not None and m[1] is not None}
