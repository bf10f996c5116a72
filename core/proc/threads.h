#pragma once
// Processes computing at once share the cores. With `processes` of them on this host, each runs
// its host numerics (OpenBLAS) on cores / processes threads, at least one: otherwise their BLAS
// threads fight over the cores (PyTorch's advice too: threads per process = cores / processes).
// Each of those processes calls it once, before it computes.
namespace scalelab {

void share_cores(int processes);

}  // namespace scalelab
