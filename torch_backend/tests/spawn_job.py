"""A job of two processes that one command starts (torch.multiprocessing's
spawn), as a user's own script is: each worker prints its pid, then worker
0 runs one distributed autograd pass through worker 1 and prints its
gradient. Run by test_backend's TestServedLine under the launcher."""
import os
import socket

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp


def say(line):
    """Writes line to the stdout both workers share in one write: print
    writes the text and its newline apart where stdout is unbuffered
    (PYTHONUNBUFFERED=1), and two workers' lines then interleave."""
    os.write(1, (line + "\n").encode())


def add(a, b):
    return a + b


def worker(rank, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = port
    say("pid %d" % os.getpid())
    rpc.init_rpc("worker%d" % rank, rank=rank, world_size=2)
    if rank == 0:
        t = torch.ones(2, requires_grad=True)
        with dist_autograd.context() as context_id:
            loss = rpc.rpc_sync("worker1", add, args=(t, t)).sum()
            dist_autograd.backward(context_id, [loss])
            say("grad %s" % dist_autograd.get_gradients(context_id)[t].tolist())
    rpc.shutdown()


if __name__ == "__main__":
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    free_port = str(s.getsockname()[1])
    s.close()
    mp.spawn(worker, args=(free_port,), nprocs=2, join=True)
