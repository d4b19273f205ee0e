// benchmarks/train_step.cpp compiled by nvcc against dax::dax_cuda: the same training step on the
// GPU (run by benchmarks/train_step_gpu.py against PyTorch eager on the same GPU).
#include "train_step.cpp"
