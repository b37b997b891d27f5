"""Benchmarks: the engine against the same model as a plain PyTorch module (eager and under
torch.compile), with the hardware limits measured in the same process."""
