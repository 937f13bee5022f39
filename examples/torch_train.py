"""A small torch RPC training job, written for torch alone: a trainer
(rank 0) fits a linear model that lives on a parameter server (rank 1),
through rpc_sync, torch's distributed autograd and DistributedOptimizer.
Run natively, torch keeps its own distributed autograd container; run
through the launcher, every context of the job lives in distautograd:

    /usr/bin/python3 examples/torch_train.py                      # native
    build/distautograd-torch /usr/bin/python3 examples/torch_train.py

The training is torch alone; the last line asks the backend whether it
served the trainer's container (distautograd.torch.state(): imported from
the checkout when the package is not installed), and if not, why.
"""
import importlib.util
import os
import socket
import sys

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
from torch.distributed.optim import DistributedOptimizer

STEPS = 30


def make_model():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 1)


def parameter_rrefs(model_rref):
    return [rpc.RRef(p) for p in model_rref.local_value().parameters()]


def forward(model_rref, x):
    return model_rref.local_value()(x)


def served_by_distautograd():
    """Whether distautograd serves torch's distributed autograd in this
    process, as the backend says, in words."""
    if importlib.util.find_spec("distautograd") is None:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python_bindings"))
    try:
        import distautograd.torch
    except ImportError as e:
        return "unknown (%s)" % e
    on, why = distautograd.torch.state()
    return "%s (%s)" % ("yes" if on else "no", why)


def worker(rank, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = port
    rpc.init_rpc("worker%d" % rank, rank=rank, world_size=2)
    if rank == 0:
        model = rpc.remote("worker1", make_model)
        optimizer = DistributedOptimizer(torch.optim.SGD, rpc.rpc_sync("worker1", parameter_rrefs, args=(model,)),
                                         lr=0.1)
        torch.manual_seed(1)
        x = torch.randn(64, 4)
        y = x @ torch.tensor([[1.0], [-2.0], [3.0], [0.5]])
        for step in range(STEPS):
            with dist_autograd.context() as context_id:
                loss = ((rpc.rpc_sync("worker1", forward, args=(model, x)) - y) ** 2).mean()
                dist_autograd.backward(context_id, [loss])
                optimizer.step(context_id)
            if step in (0, STEPS - 1):
                print("step %2d  loss %.4f" % (step, loss.item()), flush=True)
        print("distributed autograd served by distautograd: %s" % served_by_distautograd())
    rpc.shutdown()


if __name__ == "__main__":
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    free_port = str(s.getsockname()[1])
    s.close()
    mp.spawn(worker, args=(free_port,), nprocs=2, join=True)
    sys.exit(0)
