"""`make corpus`: the Hugging Face corpus (corpus.py beside this file) as readable FX dump pairs.

    python examples/huggingface/make_corpus.py [OUT]        # OUT defaults to build/corpus/hf
    D=OUT/llama/fw; shardproof verify --seq $D/tp1 --dist $D/tp2 --auto-relations \
        --relations $D/tp2.constants.yaml                                          # verified
    D=OUT/llama/fw; shardproof verify --seq $D/tp1 --dist $D/tp2.bug --auto-relations \
        --relations $D/tp2.bug.constants.yaml                                      # violation

For each architecture, forward (``fw``: the logits) and training step (``train``: the forward and
backward as one joint graph, outputs the loss then every gradient), eager attention: the graphs
shardproof captures from the live case (make_fx over the functionalized program, every rank
under the fake process group), written with ``GraphModule.print_readable()`` as a user writes a
dump: ``tp1/fw.g0.r0.py`` for the single device, ``tp<N>/fw.g0.r<rank>.py`` per rank at TP 2 and
4, ``tp<N>.bug/`` the injected plan bug (forward). Placeholders are named after the parameters
and inputs (``model_model_layers_0_self_attn_q_proj_weight``, ``input_ids``), so
``--auto-relations`` relates them by name and shape; ``OUT/index.txt`` lists every pair and the
verdict it must get; ``<dist>.constants.yaml`` states the scalar tensor constants
(``self._tensor_constant0``) whose values print_readable leaves out.
"""
import argparse
import os
import re
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402

from shardproof import api  # noqa: E402
from shardproof.frontends import torch_capture  # noqa: E402

WORLDS = (2, 4)


def _fx_name(name: str) -> str:
    return re.sub(r"\W", "_", name)


def readable(fx_graph, input_names: list[str]) -> str:
    """The traced graph as ``print_readable`` writes it, its placeholders renamed after the
    program's inputs (a parameter's dotted name with ``_`` for the dots)."""
    placeholders = [n for n in fx_graph.nodes if n.op == "placeholder"]
    for node, name in zip(placeholders, input_names):
        node.name = node.target = _fx_name(name)
    module = fx_graph.owning_module
    module.recompile()
    return module.print_readable(print_output=False)


def tensor_constants(fx_graph) -> dict:
    """The graph's tensor constants (``self._tensor_constant0``: print_readable elides their
    values), each a number; a constant of several elements has no place in a relations file."""
    module, out = fx_graph.owning_module, {}
    for node in fx_graph.nodes:
        if node.op == "get_attr":
            value = getattr(module, node.target)
            if value.numel() != 1:
                raise ValueError(f"tensor constant {node.target} has {value.numel()} elements: not a number")
            out[node.target] = value.item()
    return out


def write_constants(path: str, seq: dict, dist: dict) -> None:
    """A relations file of the constants the two dumps elide (``{seq: v, dist: v}`` each)."""
    lines = ["# the tensor constants the dumps do not print (make_corpus.py)", "constants:"]
    for name in sorted(set(seq) | set(dist), key=lambda n: (len(n), n)):
        sides = ", ".join(f"{side}: {values[name]!r}" for side, values in (("seq", seq), ("dist", dist))
                          if name in values)
        lines.append(f"  {name}: {{{sides}}}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def capture_dumps(case, folder: str) -> str:
    """Capture `case` and write its graphs under `folder` (``tp1/`` and ``tp<N>/``, or
    ``tp<N>.bug/`` for a case with ``meta["bug"]``), and the constants both elide in
    ``<dist>.constants.yaml``; returns the dist folder's name."""
    dist = f"tp{case.world_size}" + (".bug" if case.meta.get("bug") else "")
    constants = {"seq": {}, "dist": {}}

    def sink(label, fx_graph, input_names, output_names):
        side = "seq" if label == "single-device" else "dist"
        found = tensor_constants(fx_graph)
        if any(constants[side].get(k, v) != v for k, v in found.items()):
            raise ValueError(f"{label}: a tensor constant differs between ranks: {found} vs {constants[side]}")
        constants[side].update(found)
        name = os.path.join("tp1", "fw.g0.r0.py") if side == "seq" else os.path.join(dist, f"fw.g0.r{label.split()[-1]}.py")
        path = os.path.join(folder, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(readable(fx_graph, input_names))

    torch_capture.FX_SINKS.append(sink)
    try:
        api.prepare(case)
    finally:
        torch_capture.FX_SINKS.remove(sink)
    write_constants(os.path.join(folder, dist + ".constants.yaml"), constants["seq"], constants["dist"])
    return dist


def configurations(archs=None, worlds=WORLDS):
    """(arch, mode, world, bug) of every dump directory: forward and training step at each
    world size, the forward's injected bug at each world size."""
    for arch in archs or corpus.ARCHS:
        for mode in corpus.MODES:
            for world in worlds:
                for bug in ((False, True) if mode == "fw" else (False,)):
                    yield arch, mode, world, bug


def main(out: str, archs=None, worlds=WORLDS) -> list[tuple]:
    index = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for arch, mode, world, bug in configurations(archs, worlds):
            folder = os.path.join(out, arch, mode)
            dist = capture_dumps(corpus.make_case(arch, world, "eager", mode, bug), folder)
            index.append((os.path.join(folder, "tp1"), os.path.join(folder, dist),
                          os.path.join(folder, dist + ".constants.yaml"),
                          "violation" if bug else "unknown" if (arch, mode) in corpus.UNPROVED else "verified"))
            print(f"wrote {folder}/{dist}", flush=True)
    with open(os.path.join(out, "index.txt"), "w") as f:
        f.writelines(" ".join(row) + "\n" for row in index)
    return index


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=os.path.join("build", "corpus", "hf"))
    parser.add_argument("--arch", action="append", help="only these architectures (repeatable)")
    args = parser.parse_args()
    main(args.out, args.arch)
