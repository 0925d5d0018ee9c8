"""The corpus as readable FX dumps: megatron-core's GPT and torchtitan's Llama (the live cases
beside this file), the single device and each rank at TP 2 and 4, correct and with the
injected bug, traced as shardproof captures them (each rank under a fake process group,
collectives as ``_c10d_functional`` ops) and written with ``GraphModule.print_readable()``,
placeholders named after the parameters and inputs (dots as underscores).

    python examples/corpus/dump_libraries.py build/corpus/libraries        # (make corpus)
    shardproof verify --seq build/corpus/libraries/megatron_gpt/tp1 --dist build/corpus/libraries/megatron_gpt/tp2 --auto-relations

Layout: ``<out>/<case>/tp1/fw.g0.r0.py``, ``<out>/<case>/tp<N>/fw.g0.r<rank>.py`` and
``<out>/<case>/tp<N>.bug/...``, each distributed dump with a relations file beside it
(``tp<N>.yaml``): the input relations the live capture inferred by value that name and shape
cannot give (megatron's fc1 is [gate_r; up_r]: Interleaved) and the tensor constants a dump
does not print. A library that is not installed is skipped with a message.

    shardproof verify --seq build/corpus/libraries/megatron_gpt/tp1 --dist build/corpus/libraries/megatron_gpt/tp2 \
        --relations build/corpus/libraries/megatron_gpt/tp2.yaml --auto-relations
Training steps (``megatron_gpt_train``, ``torchtitan_llama_train``): the joint fw+bw graph as
shardproof captures it, outputs named ``loss`` and ``grad_<param>``, with ``expect:`` in the
relations file (each gradient laid out as its parameter: a replicated norm weight's gradient left
a partial sum is a violation, not a recoverable output). ``<out>/index.txt`` lists every pair,
its relations file and the verdict it must get.

    shardproof verify --seq build/corpus/libraries/megatron_gpt_train/tp1 \
        --dist build/corpus/libraries/megatron_gpt_train/tp2 \
        --relations build/corpus/libraries/megatron_gpt_train/tp2.yaml --auto-relations   # verified"""
from __future__ import annotations

import importlib
import os
import re
import sys

import torch
import yaml
from torch._subclasses.functional_tensor import FunctionalTensorMode, dispatch_functionalize
from torch.fx.experimental.proxy_tensor import make_fx

from shardproof.frontends import torch_capture as tc
from shardproof.frontends.torch_decomp import capture_decompositions

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = {"megatron_gpt": "fc2_not_reduced", "torchtitan_llama": None}
TRAIN_CASES = {"megatron_gpt_train": "norm_grad_not_reduced", "torchtitan_llama_train": "ids_partial"}  # training steps: joint fw+bw graphs
WORLDS = (2, 4)


def _gm(program, data: dict):
    inputs = tc.program_inputs(program, data)
    names = list(inputs)
    run = tc._call(program, names, set(data))

    def flat(*args):
        out = tc._flatten_outputs(run(*args))
        return [tc.local_tensor(o) for o in out.values()]

    with tc.functional_collectives(), tc.user_stack_traces(), tc.library_tracing():
        gm = make_fx(dispatch_functionalize(flat, FunctionalTensorMode()),
                     decomposition_table=capture_decompositions())(*inputs.values())
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, name in zip(placeholders, names):
        node.name = node.target = name.replace(".", "_")
    gm.recompile()
    return gm


def _write(gm, path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(gm.print_readable(print_output=False))


def _constants(gm, side: str, into: dict) -> None:
    """The graph's tensor constants (print_readable elides their values), by name and side."""
    for node in gm.graph.nodes:
        value = getattr(gm, node.target, None) if node.op == "get_attr" else None
        if isinstance(value, torch.Tensor):
            into.setdefault(node.target, {})[side] = value.item() if value.dim() == 0 else value.flatten().tolist()


def _relations(case, gms: list, single_gm, path: str) -> None:
    from shardproof import api
    bindings = api.prepare(case).bindings
    inputs = {k.replace(".", "_"): str(b.relation) for k, b in bindings.items()
              if str(b.relation).startswith(("Interleaved", "Slices"))}
    constants: dict = {}
    _constants(single_gm, "seq", constants)
    for gm in gms:
        _constants(gm, "dist", constants)
    with open(path, "w") as f:
        f.write("# written by examples/corpus/dump_libraries.py from the live capture\n")
        f.write(yaml.safe_dump({k: v for k, v in (("inputs", inputs), ("constants", constants)) if v},
                               sort_keys=False))


def dump_case(name: str, bug: str | None, out: str) -> None:
    module = importlib.import_module(name)
    case = module.make_case(2)
    single = _gm(case.single, dict(case.inputs))
    _write(single, os.path.join(out, name, "tp1", "fw.g0.r0.py"))
    for world in WORLDS:
        for tag, b in (("", None),) + (((".bug", bug),) if bug else ()):
            c = module.make_case(world, b)
            gms = []
            for rank in range(world):
                with tc.fake_world(rank, world):
                    data = c.dist_inputs(rank, world, c.inputs) if c.dist_inputs else dict(c.inputs)
                    gms.append(_gm(c.distributed(rank, world), data))
                _write(gms[-1], os.path.join(out, name, f"tp{world}{tag}", f"fw.g0.r{rank}.py"))
            _relations(c, gms, single, os.path.join(out, name, f"tp{world}{tag}.yaml"))
    print(f"{name}: written under {os.path.join(out, name)}")


def dump_step(case, folder: str) -> str:
    """A training case's joint fw+bw graphs as shardproof captures them (``tp1/fw.g0.r0.py``,
    ``tp<N>[.bug]/fw.g0.r<rank>.py``: outputs the loss, then every gradient) and the relations
    file beside them (``tp<N>[.bug].yaml``); returns the dist folder's name."""
    from shardproof import api
    dist = f"tp{case.world_size}" + (".bug" if case.meta.get("bug") else "")
    constants: dict = {}
    returns: list = []

    def sink(label, fx_graph, input_names, output_names):
        seq = label == "single-device"
        if not seq:
            returns[:] = output_names
        _constants(fx_graph.owning_module, "seq" if seq else "dist", constants)
        for node, name in zip([n for n in fx_graph.nodes if n.op == "placeholder"], input_names):
            node.name = node.target = name.replace(".", "_")
        returned = next(n for n in fx_graph.nodes if n.op == "output").args[0]
        for node, name in zip(returned, output_names):  # loss, grad_<param>: what --auto-relations pairs by
            if isinstance(node, torch.fx.Node) and node.op != "placeholder":
                node.name = re.sub(r"\W", "_", name)
        fx_graph.owning_module.recompile()
        _write(fx_graph.owning_module, os.path.join(folder, "tp1" if seq else dist,
                                                    f"fw.g0.r{0 if seq else label.split()[-1]}.py"))

    tc.FX_SINKS.append(sink)
    try:
        bindings = api.prepare(case).bindings
    finally:
        tc.FX_SINKS.remove(sink)
    inputs = {k.replace(".", "_"): str(b.relation) for k, b in bindings.items()
              if str(b.relation).startswith(("Interleaved", "Slices"))}
    # a gradient laid out as its parameter (a replicated norm weight's must end replicated, not
    # a partial sum the dump alone would accept as recoverable), the loss replicated
    expect = {"loss": "Replicate()"}
    expect.update({re.sub(r"\W", "_", o): str(bindings[o.split(":", 1)[1]].relation) for o in returns
                   if o.startswith("grad:")})
    with open(os.path.join(folder, dist + ".yaml"), "w") as f:
        f.write("# written by examples/corpus/dump_libraries.py from the live capture\n")
        f.write(yaml.safe_dump({k: v for k, v in (("inputs", inputs), ("expect", expect), ("constants", constants))
                                if v}, sort_keys=False))
    return dist


def dump_steps(name: str, bug: str | None, out: str) -> list[tuple]:
    """Every world size's training-step dumps of case module `name`, correct and with `bug`:
    (seq folder, dist folder, relations file, the verdict it must get)."""
    module = importlib.import_module(name)
    rows = []
    for world in WORLDS:
        for b in (None,) + ((bug,) if bug else ()):
            dist = dump_step(module.make_case(world, b), os.path.join(out, name))
            root = os.path.join(out, name)
            rows.append((os.path.join(root, "tp1"), os.path.join(root, dist), os.path.join(root, dist + ".yaml"),
                         "violation" if b else "verified"))
    print(f"{name}: written under {os.path.join(out, name)}")
    return rows


def main(out: str) -> None:
    sys.path.insert(0, HERE)
    index = []
    for name, bug in CASES.items():
        try:
            dump_case(name, bug, out)
            for world in WORLDS:
                for tag in ("",) + ((".bug",) if bug else ()):
                    root = os.path.join(out, name)
                    index.append((os.path.join(root, "tp1"), os.path.join(root, f"tp{world}{tag}"),
                                  os.path.join(root, f"tp{world}{tag}.yaml"), "violation" if tag else "verified"))
        except ImportError as exc:
            print(f"{name}: skipped ({exc})")
    for name, bug in TRAIN_CASES.items():
        try:
            index += dump_steps(name, bug, out)
        except ImportError as exc:
            print(f"{name}: skipped ({exc})")
    with open(os.path.join(out, "index.txt"), "w") as f:
        f.writelines(" ".join(row) + "\n" for row in index)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/corpus/libraries")
