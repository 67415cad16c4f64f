"""Writes this folder's Flight Recorder dumps: `python make_dumps.py 0 & python
make_dumps.py 1; wait` (torch with its gloo backend; see README.md)."""

import os
import sys
import time

import torch
import torch.distributed as dist

rank = int(sys.argv[1])
os.environ["MASTER_ADDR"] = "127.0.0.1"
os.environ["MASTER_PORT"] = "29533"
os.environ["TORCH_FR_BUFFER_SIZE"] = "64"
dist.init_process_group("gloo", rank=rank, world_size=2)
x = torch.ones(2, 2)
for _ in range(3):
    dist.all_reduce(x)
if rank == 0:  # rank 1 skips the fourth: rank 0's never completes
    pending = dist.all_reduce(x, async_op=True)
time.sleep(1.0)
with open(f"nccl_trace_rank_{rank}", "wb") as f:
    f.write(torch._C._distributed_c10d._dump_fr_trace())
with open(f"fr_trace_rank_{rank}.json", "wb") as f:
    f.write(torch._C._distributed_c10d._dump_fr_trace_json())
os._exit(0)  # the pending all_reduce would hold the process
