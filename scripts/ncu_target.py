"""A few representative kernels (GEMM, softmax, elementwise, a tiny-grid kernel) for an ``ncu --csv`` fixture."""

import torch

a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
c = a @ b
s = torch.softmax(c.float(), dim=-1)
e = torch.nn.functional.gelu(s) * 2.0
small = torch.randn(64, device="cuda").sum()
torch.cuda.synchronize()
