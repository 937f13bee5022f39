"""One worker of a job that torchrun starts (the launcher in front of it:
distautograd-torch torchrun ...): torchrun gives it RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT; it runs one distributed autograd pass through
the next worker and writes OUT_DIR/report-RANK.json with whether the
backend serves, its gradient and its live contexts at the end.

usage: torchrun ... torchrun_job.py OUT_DIR
"""
import json
import os
import sys

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import distautograd.torch


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    rpc.init_rpc("w%d" % rank, rank=rank, world_size=world)
    t = torch.full((3,), float(rank + 1), requires_grad=True)
    with dist_autograd.context() as cid:
        y = rpc.rpc_sync("w%d" % ((rank + 1) % world), torch.mul, args=(t, t))
        dist_autograd.backward(cid, [y.sum()])
        grad = dist_autograd.get_gradients(cid)[t].tolist()
    rpc.shutdown()
    report = {"active": distautograd.torch.active(), "grad": grad,
              "contexts": dist_autograd._get_debug_info()["num_autograd_contexts"]}
    with open(os.path.join(sys.argv[1], "report-%d.json" % rank), "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
