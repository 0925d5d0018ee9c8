"""Split ``TORCH_LOGS=aot_graphs`` output into dump files shardproof reads.

    TORCH_LOGS=aot_graphs torchrun --nproc-per-node 2 train.py 2> aot.log   # or one log per rank
    python examples/dumps/torch_logs.py rank0.log OUT/tp2 --rank 0           # OUT/tp2/fw.g0.r0.py, ...

Each log line carries a prefix (``I1127 05:35:14.94 123 torch/_functorch/...] [0/0]
[__aot_graphs] ``); a graph starts at ``===== Forward graph N =====`` (or Backward / Joint)
and its ``print_readable()`` text follows, one line per log line, up to its ``return``.
Graphs are written as ``fw.g<N>.r<rank>.py`` / ``bw.g<N>.r<rank>.py``.
"""
import argparse
import os
import re

_MARK = re.compile(r"===== (Forward|Backward|Joint) graph (\d+) =====")
_KIND = {"Forward": "fw", "Backward": "bw", "Joint": "joint"}


def split_aot_graphs(text: str, rank_prefix: str | None = None) -> list[tuple[str, int, str]]:
    """(kind, N, graph text) for each graph in a TORCH_LOGS=aot_graphs log; with
    `rank_prefix` (torchrun's ``[rank0]:``), only the lines that carry it."""
    graphs, current = [], None
    for line in text.splitlines():
        if rank_prefix is not None:
            if not line.startswith(rank_prefix):
                continue
            line = line[len(rank_prefix):]
        if "[__aot_graphs]" not in line:
            continue
        body = line.split("[__aot_graphs]", 1)[1][1:]
        mark = _MARK.search(body)
        if mark:
            current = (_KIND[mark.group(1)], int(mark.group(2)), [])
            continue
        if current is None:
            continue
        if not current[2]:  # the header: "<file of the lazy module> class <lambda>(torch.nn.Module):"
            if "class " not in body:
                continue
            body = body[body.index("class "):]
        current[2].append(body)
        if body.startswith("        return "):
            graphs.append((current[0], current[1], "\n".join(current[2]) + "\n"))
            current = None
    return graphs


def write_dumps(text: str, out: str, rank: int, rank_prefix: str | None = None) -> list[str]:
    os.makedirs(out, exist_ok=True)
    paths = []
    for kind, n, graph in split_aot_graphs(text, rank_prefix):
        paths.append(os.path.join(out, f"{kind}.g{n}.r{rank}.py"))
        with open(paths[-1], "w") as f:
            f.write(graph)
    return paths


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("out")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--rank-prefix", help="keep only lines starting with this (torchrun: '[rank0]:')")
    args = parser.parse_args()
    with open(args.log) as f:
        print("\n".join(write_dumps(f.read(), args.out, args.rank, args.rank_prefix)))
