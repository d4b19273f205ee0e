#!/usr/bin/env python3
"""Writes torch_written.safetensors with the real `safetensors` package from PyTorch tensors, the
golden file that tests/mpi/interop_test.cpp loads (its other safetensors fixtures are written by
the format's spec at run time). Run once where PyTorch and safetensors are installed (the GPU
machine's image has both) and commit the file; the test pins its bytes' meaning, not this script.

    python3 make_torch_safetensors.py OUTPUT_FILE

Every value follows from its index, so the test recomputes them:
  embed  float32  (3, 5)  i / 4
  w64    float64  (2, 3)  i * 0.1 - 0.25
  ids    int64    (7,)    i - 3
  h      float16  (2, 2)  i / 8
  bf     bfloat16 (2, 3)  i * 0.5 - 1
  mask   bool     (5,)    i % 2 == 1
"""
import sys

import torch
from safetensors.torch import save_file


def main():
    out = sys.argv[1]
    tensors = {
        "embed": torch.arange(15, dtype=torch.float32).reshape(3, 5) / 4,
        "w64": torch.arange(6, dtype=torch.float64).reshape(2, 3) * 0.1 - 0.25,
        "ids": torch.arange(7, dtype=torch.int64) - 3,
        "h": (torch.arange(4, dtype=torch.float32) / 8).to(torch.float16).reshape(2, 2),
        "bf": (torch.arange(6, dtype=torch.float32) * 0.5 - 1).to(torch.bfloat16).reshape(2, 3),
        "mask": torch.arange(5) % 2 == 1,
    }
    save_file(tensors, out, metadata={"format": "pt", "written_by": "make_torch_safetensors.py"})
    import safetensors
    print(f"wrote {out} with safetensors {safetensors.__version__}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
