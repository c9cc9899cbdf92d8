#!/usr/bin/python3
"""The same all-reduce measured with PyTorch's torch.distributed (Gloo) from Debian's python3-torch.

   allreduce_baseline.py [--world-size 2] [--mib 64] [--iters 10]
       spawns --world-size local processes that meet on 127.0.0.1;
   allreduce_baseline.py --init-method tcp://HOST:PORT --rank R [--world-size 2] [--mib 64] [--iters 10]
       runs rank R alone in this process (one invocation per rank, e.g. one per test host); rank 0
       serves the store at HOST:PORT and prints the line. Gloo binds the interface named by
       GLOO_SOCKET_IFNAME, else the address this host's name resolves to.
"""
import argparse
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, args, init_method):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=args.world_size)
    t = torch.ones(int(args.mib * 1024 * 1024 / 4))
    dist.all_reduce(t)
    times = []
    for _ in range(args.iters):
        dist.barrier()
        start = time.monotonic()
        dist.all_reduce(t)
        times.append(time.monotonic() - start)
    median = sorted(times)[len(times) // 2]
    algbw = t.numel() * 4 / median / 1e9
    if rank == 0:
        n = args.world_size
        print(f"pytorch      world={n}  size={args.mib:g} MiB  median={median * 1e3:.1f} ms  "
              f"algbw={algbw:.2f} GB/s  busbw={algbw * 2 * (n - 1) / n:.2f} GB/s", flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--mib", type=float, default=64)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--init-method", help="tcp://HOST:PORT of rank 0; with --rank, run that one rank here")
    parser.add_argument("--rank", type=int, help="this process's rank (needs --init-method)")
    args = parser.parse_args()
    if (args.init_method is None) != (args.rank is None):
        parser.error("--init-method and --rank go together")
    if args.rank is not None:
        if not args.init_method.startswith("tcp://"):
            parser.error("--init-method must be tcp://HOST:PORT")
        if not 0 <= args.rank < args.world_size:
            parser.error(f"--rank must be in [0, {args.world_size})")
        worker(args.rank, args, args.init_method)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, f"tcp://127.0.0.1:{port}"), nprocs=args.world_size)


if __name__ == "__main__":
    main()
