"""Write transformers-neuronx Llama decoder programs as HLO text at any size, layer count and
TP degree: the op sequence of ``../shared/graphs/entangle/aws_llama`` (fused QKV split
per rank, RoPE by halves, GQA by broadcasting k/v heads, masked softmax by reduce,
all-reduce after o_proj and down_proj, RMSNorm custom calls, a gather of the last token,
an LM head sharded by vocabulary). Small configurations can be evaluated numerically, so
the proof is cross-checked and injected bugs get full counterexamples.

``llama_hlo(tp=1)`` is the single-device program; ``bug`` injects one mistake:
``"k_from_q"`` (the key projection sliced from the query columns), ``"no_allreduce"``
(the MLP's partial sums never reduced), ``"rope_swap"`` (sin and cos swapped).
"""
from __future__ import annotations


def llama_hlo(tp: int = 1, layers: int = 1, hidden: int = 16, heads: int = 8, kv_heads: int = 4, head_dim: int = 4,
              ffn: int = 32, vocab: int = 24, seq: int = 4, batch: int = 2, bug: str | None = None,
              softmax: bool = False, k_bias: bool = False) -> str:
    # as transformers-neuronx does where tp does not divide them: the ffn, the vocabulary and
    # the query heads are zero-padded to a multiple of tp, the k/v heads repeated to the
    # query heads (MHA) and padded alike
    padded = heads % tp != 0
    nq, f, v = -(-heads // tp), -(-ffn // tp), -(-vocab // tp)
    nkv = nq if padded else max(1, kv_heads // tp)
    H, D, S, B = hidden, head_dim, seq, batch
    q, kv = nq * D, nkv * D
    half = D // 2
    rep = nq // nkv
    lines, params, counter = [], [], [0]

    def fresh(kind: str) -> str:
        counter[0] += 1
        return f"{kind}.{counter[0]}"

    def emit(kind: str, shape: str, body: str, where: str = "model.py:1") -> str:
        name = fresh(kind)
        file, line = where.split(":")
        lines.append(f'  %{name} = {shape} {body}, metadata={{op_type="{kind}" source_file="{file}" '
                     f'source_line={line}}}')
        return name

    def param(shape: str) -> str:
        i = len(params)
        name = f"p{i}.{100 + i}"
        params.append(shape)
        lines.append(f"  %{name} = {shape} parameter({i})")
        return name

    def allreduce(x: str, shape: str) -> str:
        if tp == 1:
            return x
        groups = "{" + ",".join(map(str, range(tp))) + "}"
        return emit("all-reduce", shape, f"all-reduce(%{x}), replica_groups={{{groups}}}, to_apply=%sum")

    def rmsnorm(x: str, w: str, shape: str) -> str:
        x32 = emit("convert", shape.replace("f16", "f32"), f"convert(%{x})")
        eps = emit("constant", "f32[]", "constant(1e-05)")
        return emit("custom-call", shape, f'custom-call(%{x32}, %{w}, %{eps}), custom_call_target="AwsNeuronRmsNorm", '
                                          f'backend_config="0"', "model.py:20")

    hs = param(f"f16[{H},{S},{B}]")
    pos = param(f"s32[{S}]")
    start = param(f"s32[{B}]")
    last = param("s32[1]")
    inv = emit("constant", f"f32[{half}]", "constant({" + ", ".join(str(1.0 / (2 ** i)) for i in range(half)) + "})")
    # rotary tables [S, half]
    posf = emit("convert", f"f32[{S}]", f"convert(%{pos})")
    posc = emit("reshape", f"f32[{S},1]", f"reshape(%{posf})")
    invr = emit("reshape", f"f32[1,{half}]", f"reshape(%{inv})")
    ang = emit("dot", f"f32[{S},{half}]", f"dot(%{posc}, %{invr}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}")
    cos = emit("convert", f"f16[{S},{half}]", f"convert(%{emit('cosine', f'f32[{S},{half}]', f'cosine(%{ang})')})")
    sin = emit("convert", f"f16[{S},{half}]", f"convert(%{emit('sine', f'f32[{S},{half}]', f'sine(%{ang})')})")
    if bug == "rope_swap" and tp > 1:
        cos, sin = sin, cos
    # causal + start mask [B, S, S]
    io = emit("iota", f"s32[{S}]", "iota(), iota_dimension=0")
    a = emit("broadcast", f"s32[{S},{S}]", f"broadcast(%{io}), dimensions={{1}}")
    b = emit("broadcast", f"s32[{S},{S}]", f"broadcast(%{pos}), dimensions={{0}}")
    causal = emit("compare", f"pred[{S},{S}]", f"compare(%{a}, %{b}), direction=LE")
    c3 = emit("broadcast", f"pred[{B},{S},{S}]", f"broadcast(%{causal}), dimensions={{1,2}}")
    a2 = emit("broadcast", f"s32[{B},{S}]", f"broadcast(%{io}), dimensions={{1}}")
    b2 = emit("broadcast", f"s32[{B},{S}]", f"broadcast(%{start}), dimensions={{0}}")
    started = emit("compare", f"pred[{B},{S}]", f"compare(%{a2}, %{b2}), direction=GE")
    s3 = emit("broadcast", f"pred[{B},{S},{S}]", f"broadcast(%{started}), dimensions={{0,2}}")
    mask = emit("and", f"pred[{B},{S},{S}]", f"and(%{c3}, %{s3})")
    mask4 = emit("broadcast", f"pred[{B},{nq},{S},{S}]", f"broadcast(%{mask}), dimensions={{0,2,3}}")

    def rope(x: str, n: int) -> str:
        shape = f"f16[{S},{B},{n},{half}]"
        c = emit("broadcast", shape, f"broadcast(%{cos}), dimensions={{0,3}}")
        s = emit("broadcast", shape, f"broadcast(%{sin}), dimensions={{0,3}}")
        x1 = emit("slice", shape, f"slice(%{x}), slice={{[0:{S}], [0:{B}], [0:{n}], [0:{half}]}}")
        x2 = emit("slice", shape, f"slice(%{x}), slice={{[0:{S}], [0:{B}], [0:{n}], [{half}:{D}]}}")
        lo = emit("subtract", shape, f"subtract(%{emit('multiply', shape, f'multiply(%{c}, %{x1})')}, "
                                     f"%{emit('multiply', shape, f'multiply(%{s}, %{x2})')})")
        hi = emit("add", shape, f"add(%{emit('multiply', shape, f'multiply(%{c}, %{x2})')}, "
                                f"%{emit('multiply', shape, f'multiply(%{s}, %{x1})')})")
        return emit("concatenate", f"f16[{S},{B},{n},{D}]", f"concatenate(%{lo}, %{hi}), dimensions={{3}}")

    def allreduce_max(x: str, shape: str) -> str:
        if tp == 1:
            return x
        groups = "{" + ",".join(map(str, range(tp))) + "}"
        return emit("all-reduce", shape, f"all-reduce(%{x}), replica_groups={{{groups}}}, to_apply=%max")

    def repeat_heads(x: str) -> str:
        if rep == 1:
            return x
        wide = emit("broadcast", f"f16[{S},{B},{nkv},{rep},{D}]", f"broadcast(%{x}), dimensions={{0,1,2,4}}")
        return emit("reshape", f"f16[{S},{B},{nq},{D}]", f"reshape(%{wide})")

    outs = []
    for _ in range(layers):
        w_in, w_qkv, w_o = param(f"f32[{H}]"), param(f"f16[{H},{q + 2 * kv}]"), param(f"f16[{H},{q}]")
        w_post, w_gate, w_up, w_down = param(f"f32[{H}]"), param(f"f16[{H},{f}]"), param(f"f16[{H},{f}]"), \
            param(f"f16[{H},{f}]")
        normed = emit("reshape", f"f16[{H},{S * B}]", f"reshape(%{rmsnorm(hs, w_in, f'f16[{H},{S},{B}]')})")
        fused = emit("dot", f"f16[{S * B},{q + 2 * kv}]",
                     f"dot(%{normed}, %{w_qkv}), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}", "attn.py:10")
        k_at = 0 if bug == "k_from_q" and tp > 1 else q
        qs = emit("slice", f"f16[{S * B},{q}]", f"slice(%{fused}), slice={{[0:{S * B}], [0:{q}]}}", "attn.py:11")
        ks = emit("slice", f"f16[{S * B},{kv}]", f"slice(%{fused}), slice={{[0:{S * B}], [{k_at}:{k_at + kv}]}}",
                  "attn.py:12")
        vs = emit("slice", f"f16[{S * B},{kv}]", f"slice(%{fused}), slice={{[0:{S * B}], [{q + kv}:{q + 2 * kv}]}}",
                  "attn.py:13")
        qr = rope(emit("reshape", f"f16[{S},{B},{nq},{D}]", f"reshape(%{qs})"), nq)
        scale = emit("broadcast", f"f16[{S},{B},{nq},{D}]", f"broadcast(%{emit('constant', 'f16[]', 'constant(2)')}), "
                                                            f"dimensions={{}}")
        qr = emit("divide", f"f16[{S},{B},{nq},{D}]", f"divide(%{qr}, %{scale})")
        kr = rope(emit("reshape", f"f16[{S},{B},{nkv},{D}]", f"reshape(%{ks})"), nkv)
        if k_bias:  # a constant added to every key lane: padded heads too
            kr = emit("add", f"f16[{S},{B},{nkv},{D}]", f"add(%{kr}, %" + emit(
                "broadcast", f"f16[{S},{B},{nkv},{D}]", f"broadcast(%{emit('constant', 'f16[]', 'constant(0.5)')}), "
                                                        f"dimensions={{}}") + ")", "attn.py:14")
        vr = emit("reshape", f"f16[{S},{B},{nkv},{D}]", f"reshape(%{vs})")
        scores = emit("dot", f"f16[{B},{nq},{S},{S}]", f"dot(%{qr}, %{repeat_heads(kr)}), lhs_batch_dims={{1,2}}, "
                      f"lhs_contracting_dims={{3}}, rhs_batch_dims={{1,2}}, rhs_contracting_dims={{3}}")
        fill = emit("broadcast", f"f16[{B},{nq},{S},{S}]",
                    f"broadcast(%{emit('constant', 'f16[]', 'constant(-30000)')}), dimensions={{}}")
        masked = emit("select", f"f16[{B},{nq},{S},{S}]", f"select(%{mask4}, %{scores}, %{fill})")
        mx = emit("reduce", f"f16[{B},{nq},{S}]", f"reduce(%{masked}, %{emit('constant', 'f16[]', 'constant(-inf)')}), "
                                                  f"dimensions={{3}}, to_apply=%max")
        e = emit("exponential", f"f16[{B},{nq},{S},{S}]", f"exponential(%{emit('subtract', f'f16[{B},{nq},{S},{S}]', f'subtract(%{masked}, %' + emit('broadcast', f'f16[{B},{nq},{S},{S}]', f'broadcast(%{mx}), dimensions={{0,1,2}}') + ')')})")
        tot = emit("reduce", f"f16[{B},{nq},{S}]", f"reduce(%{e}, %{emit('constant', 'f16[]', 'constant(0)')}), "
                                                   f"dimensions={{3}}, to_apply=%sum")
        probs = emit("divide", f"f16[{B},{nq},{S},{S}]", f"divide(%{e}, %" + emit(
            "broadcast", f"f16[{B},{nq},{S},{S}]", f"broadcast(%{tot}), dimensions={{0,1,2}}") + ")")
        ctx = emit("dot", f"f16[{B},{nq},{S},{D}]", f"dot(%{probs}, %{repeat_heads(vr)}), lhs_batch_dims={{0,1}}, "
                   f"lhs_contracting_dims={{3}}, rhs_batch_dims={{1,2}}, rhs_contracting_dims={{0}}")
        ctx = emit("reshape", f"f16[{S * B},{q}]",
                   f"reshape(%{emit('transpose', f'f16[{S},{B},{nq},{D}]', f'transpose(%{ctx}), dimensions={{2,0,1,3}}')})")
        o = emit("dot", f"f16[{S * B},{H}]", f"dot(%{ctx}, %{w_o}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}")
        o = emit("reshape", f"f16[{H},{S},{B}]", f"reshape(%{emit('transpose', f'f16[{H},{S * B}]', f'transpose(%{o}), dimensions={{1,0}}')})")
        hs = emit("add", f"f16[{H},{S},{B}]", f"add(%{allreduce(o, f'f16[{H},{S},{B}]')}, %{hs})")
        normed = emit("reshape", f"f16[{H},{S * B}]", f"reshape(%{rmsnorm(hs, w_post, f'f16[{H},{S},{B}]')})")
        gate = emit("dot", f"f16[{S * B},{f}]", f"dot(%{normed}, %{w_gate}), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}")
        act = emit("multiply", f"f16[{S * B},{f}]", f"multiply(%{gate}, %{emit('logistic', f'f16[{S * B},{f}]', f'logistic(%{gate})')})")
        up = emit("dot", f"f16[{S * B},{f}]", f"dot(%{normed}, %{w_up}), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}")
        down = emit("dot", f"f16[{S * B},{H}]", f"dot(%{emit('multiply', f'f16[{S * B},{f}]', f'multiply(%{act}, %{up})')}, "
                    f"%{w_down}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}", "mlp.py:30")
        down = emit("reshape", f"f16[{H},{S},{B}]", f"reshape(%{emit('transpose', f'f16[{H},{S * B}]', f'transpose(%{down}), dimensions={{1,0}}')})")
        if bug != "no_allreduce":
            down = allreduce(down, f"f16[{H},{S},{B}]")
        hs = emit("add", f"f16[{H},{S},{B}]", f"add(%{down}, %{hs})")
        outs += [kr, vr]
    w_final, w_head = param(f"f32[{H}]"), param(f"f16[{H},{v}]")
    tok = emit("transpose", f"f16[{S},{H},{B}]", f"transpose(%{hs}), dimensions={{1,0,2}}")
    picked = emit("gather", f"f16[1,{H},{B}]", f"gather(%{tok}, %{last}), offset_dims={{1,2}}, collapsed_slice_dims={{0}}, "
                  f"start_index_map={{0}}, index_vector_dim=1, slice_sizes={{1,{H},{B}}}")
    picked = emit("transpose", f"f16[{H},1,{B}]", f"transpose(%{picked}), dimensions={{1,0,2}}")
    normed = emit("reshape", f"f16[{H},{B}]", f"reshape(%{rmsnorm(picked, w_final, f'f16[{H},1,{B}]')})")
    logits = emit("dot", f"f16[{v},{B}]", f"dot(%{w_head}, %{normed}), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}")
    if softmax:  # over the vocabulary, across ranks: max and sum all-reduced
        mx = allreduce_max(emit("reduce", f"f16[{B}]", f"reduce(%{logits}, %{emit('constant', 'f16[]', 'constant(-inf)')}), "
                                                      f"dimensions={{0}}, to_apply=%max"), f"f16[{B}]")
        e = emit("exponential", f"f16[{v},{B}]", f"exponential(%{emit('subtract', f'f16[{v},{B}]', f'subtract(%{logits}, %' + emit('broadcast', f'f16[{v},{B}]', f'broadcast(%{mx}), dimensions={{1}}') + ')')})")
        tot = emit("reduce", f"f16[{B}]", f"reduce(%{e}, %{emit('constant', 'f16[]', 'constant(0)')}), dimensions={{0}}, "
                                          f"to_apply=%sum", "head.py:40")
        tot = allreduce(tot, f"f16[{B}]")
        logits = emit("divide", f"f16[{v},{B}]", f"divide(%{e}, %" + emit(
            "broadcast", f"f16[{v},{B}]", f"broadcast(%{tot}), dimensions={{1}}") + ")")
    logits = emit("reshape", f"f16[{v},1,{B}]", f"reshape(%{logits})")
    out_shapes = [f"f16[{v},1,{B}]"] + [f"f16[{S},{B},{nkv},{D}]"] * (2 * layers)
    lines.append(f"  ROOT %tuple.0 = ({', '.join(out_shapes)}) tuple({', '.join('%' + x for x in [logits] + outs)})")
    header = [f"HloModule llama_tp{tp}, entry_computation_layout={{({', '.join(params)})->({', '.join(out_shapes)})}}", ""]
    for name, op in (("sum", "add"), ("max", "maximum")):
        header += [f"%{name} (a: f16[], b: f16[]) -> f16[] {{", "  %a = f16[] parameter(0)", "  %b = f16[] parameter(1)",
                   f"  ROOT %r = f16[] {op}(%a, %b)", "}", ""]
    sig = ", ".join(f"p{i}.{100 + i}: {s}" for i, s in enumerate(params))
    return "\n".join(header + [f"ENTRY %main ({sig}) -> ({', '.join(out_shapes)}) {{"] + lines + ["}", ""])


def _padded(rel: str, dim: int, size: int, tp: int) -> str:
    return f"Padded({rel}, {dim}, [[{size}, {-(-size // tp) * tp}]])" if size % tp else rel


def llama_relations(layers: int = 1, heads: int = 8, kv_heads: int = 4, head_dim: int = 4, tp: int = 1,
                    ffn: int = 32, vocab: int = 24) -> dict:
    """Input relations (by parameter name) and expected outputs of :func:`llama_hlo` at
    `tp`: Padded relations where it pads (heads, ffn, vocabulary)."""
    mlp = _padded("Shard(1)", 1, ffn, tp)
    qkv = f"Interleaved(1, [{heads * head_dim}, {kv_heads * head_dim}, {kv_heads * head_dim}])"
    w_o, kv_out = "Shard(1)", "Shard(2)"
    if heads % tp:
        whole, group = -(-heads // tp) * tp, heads // kv_heads
        P, q, kv = whole * head_dim, heads * head_dim, kv_heads * head_dim
        qkv = f"Padded(Interleaved(1, [{P}, {P}, {P}]), 1, [[{q}, {P}], [{kv}, {P}, {group}], [{kv}, {P}, {group}]], " \
              f"unit={head_dim})"
        w_o = f"Padded(Shard(1), 1, [[{q}, {P}]])"
        kv_out = f"Padded(Shard(2), 2, [[{kv_heads}, {whole}, {group}]])"
    rel = {f"p{i}.{100 + i}": "Replicate()" for i in range(4)}
    at = 4
    for _ in range(layers):
        names = [f"p{at + k}.{100 + at + k}" for k in range(7)]
        rel.update(dict(zip(names, ["Replicate()", qkv, w_o, "Replicate()", mlp, mlp, mlp])))
        at += 7
    rel[f"p{at}.{100 + at}"] = "Replicate()"
    rel[f"p{at + 1}.{101 + at}"] = _padded("Shard(1)", 1, vocab, tp)
    expect = {"out0": _padded("Shard(0)", 0, vocab, tp), **{f"out{i}": kv_out for i in range(1, 2 * layers + 1)}}
    return {"inputs": rel, "expect": expect}


def llama_agrees(tp: int, seed: int = 0, hidden: int = 16, heads: int = 8, kv_heads: int = 4, head_dim: int = 4,
                 ffn: int = 32, vocab: int = 24, seq: int = 4, batch: int = 2, **features) -> bool:
    """Label a generated pair by running it: the op numerics of both HLO programs (numpy) on
    random weights, each rank's weights cut from the single-device ones here by hand
    (np.pad / np.repeat, as transformers-neuronx pads and repeats: not the relation code),
    and the ranks' outputs put back together. True when every output equals the
    single-device one, zero padding included."""
    import numpy as np

    from shardproof.engine.numeric import evaluate
    from shardproof.frontends.hlo_text import load_hlo_program
    from shardproof.ir.graph import DistributedProgram
    sizes = dict(hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim, ffn=ffn, vocab=vocab, seq=seq,
                 batch=batch)
    seq_g = load_hlo_program(llama_hlo(1, 1, **sizes, **features), 1, filename="seq.hlo")[0]
    dist = DistributedProgram(load_hlo_program(llama_hlo(tp, 1, **sizes, **features), tp, filename="dist.hlo"))
    gen = np.random.default_rng(seed)
    D, padded = head_dim, heads % tp != 0
    nq = -(-heads // tp)
    group = heads // kv_heads

    def pad(x, axis, to):
        width = [(0, 0)] * x.ndim
        width[axis] = (0, to - x.shape[axis])
        return np.pad(x, width)

    def shard(x, axis, r):
        n = x.shape[axis] // tp
        return np.take(x, np.arange(r * n, (r + 1) * n), axis=axis)

    names = [n.name for n in seq_g.nodes if n.op == "input"]
    whole = {}
    for n in seq_g.nodes:
        if n.op != "input":
            continue
        shape = tuple(n.type.shape)
        if not n.type.dtype.startswith("f"):  # positions, start positions, the last token's index
            whole[n.name] = gen.integers(0, seq, size=shape).astype(np.int32)
        else:
            whole[n.name] = gen.standard_normal(shape) * 0.5
    ranks = [dict() for _ in range(tp)]
    for i, name in enumerate(names):
        x = whole[name]
        for r in range(tp):
            if i < 4 or i in (4, 7, 11):  # activations, positions, norm weights: replicated
                ranks[r][name] = x
            elif i == 5:  # fused qkv: q | k | v heads, each padded (k/v repeated first) and cut per rank
                q = x[:, :heads * D].reshape(hidden, heads, D)
                k = x[:, heads * D:(heads + kv_heads) * D].reshape(hidden, kv_heads, D)
                v = x[:, (heads + kv_heads) * D:].reshape(hidden, kv_heads, D)
                if padded:
                    q = pad(q, 1, nq * tp)
                    k, v = (pad(np.repeat(t, group, axis=1), 1, nq * tp) for t in (k, v))
                ranks[r][name] = np.concatenate([shard(t, 1, r).reshape(hidden, -1) for t in (q, k, v)], 1)
            elif i == 6:  # o_proj: input features by head, zero rows for padded heads
                o = pad(x.reshape(hidden, heads, D), 1, nq * tp) if padded else x.reshape(hidden, heads, D)
                ranks[r][name] = shard(o, 1, r).reshape(hidden, -1)
            else:  # gate, up, down, LM head: columns padded to a multiple of tp
                ranks[r][name] = shard(pad(x, 1, -(-x.shape[1] // tp) * tp), 1, r)
    s_env, d_envs = evaluate(seq_g, dist, whole, ranks)
    for out, snode in seq_g.outputs.items():
        want = np.asarray(s_env[snode], dtype=np.float64)
        got = [np.asarray(d_envs[r][g.outputs[out]], dtype=np.float64) for r, g in enumerate(dist.graphs)]
        if out == "out0":  # logits: by vocabulary, zero past it
            joined = np.concatenate(got, 0)
            want = pad(want, 0, joined.shape[0])
        else:  # keys / values: by head, repeated and zero-padded as the weights are
            joined = np.concatenate(got, 2)
            if padded:
                want = pad(np.repeat(want, group, axis=2), 2, joined.shape[2])
        if joined.shape != want.shape or not np.allclose(joined, want, rtol=1e-6, atol=1e-6):
            return False
    return True
