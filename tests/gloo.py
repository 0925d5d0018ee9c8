"""Run a program on a real gloo process group (one forked process per rank, CPU), to label
test programs by what PyTorch computes, independent of shardproof."""
import datetime
import multiprocessing as mp
import os
import tempfile


def _rank(fn, rank, world, path, conn):
    import torch
    import torch.distributed as dist
    try:
        torch.set_num_threads(1)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", store=dist.FileStore(path, world), rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60))
        conn.send(("ok", fn(rank, world)))
        dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()
        os._exit(0)


def run_on_gloo(fn, world: int, timeout: float = 120.0) -> list:
    """``[fn(rank, world) for each rank]``, each rank in its own process of one gloo group
    (results must be picklable: return numpy arrays or plain values)."""
    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory() as tmp:
        pipes = [ctx.Pipe(duplex=False) for _ in range(world)]
        procs = [ctx.Process(target=_rank, args=(fn, r, world, os.path.join(tmp, "store"), pipes[r][1]))
                 for r in range(world)]
        for p in procs:
            p.start()
        out = []
        for r, (recv, _) in enumerate(pipes):
            if not recv.poll(timeout):
                raise TimeoutError(f"rank {r} timed out")
            status, value = recv.recv()
            if status != "ok":
                raise RuntimeError(f"rank {r}: {value}")
            out.append(value)
        for p in procs:
            p.join(10)
    return out
