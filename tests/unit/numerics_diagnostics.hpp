#pragma once
// What a kernel-numerics test prints when it fails (issue 38, item 6: unit.FlashNumerics and
// unit.Dtypes/FusedBlock failed intermittently with identical wrong values, i.e. through a discrete
// alternative path: the process's first MKL VML exp on the OpenMP worker, kernels/attention/intra_op_warmup.hpp): the worst element unravelled,
// both values, and the process state that picks ATen's CPU paths (the vector ISA ATen dispatched to,
// the intra-op threads, OpenMP / MKL settings), so the next failure names the path it took.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>

#include <sstream>
#include <string>

#include "sharders/core/check.hpp"

namespace cpbench::test {

inline std::string numerics_diagnostics(const at::Tensor& got, const at::Tensor& want) {
  std::ostringstream os;
  const at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  const at::Tensor d = (g - w).abs().nan_to_num(0.0, 0.0, 0.0).flatten();
  const int64_t i = d.argmax().item<int64_t>();
  os << "\n  worst element " << i << " of " << cpbench::shape_str(got.sizes()) << " (";
  int64_t rest = i;
  std::string idx;
  for (int64_t k = got.dim() - 1; k >= 0; --k) {
    idx = std::to_string(rest % got.size(k)) + (idx.empty() ? "" : ", ") + idx;
    rest /= got.size(k);
  }
  os.precision(17);
  os << idx << "): got " << g.flatten()[i].item<double>() << ", want " << w.flatten()[i].item<double>()
     << "; elements off by > 1e-6 relative: "
     << (d > w.flatten().abs().clamp_min(1.0) * 1e-6).sum().item<int64_t>() << "\n  cpu capability "
     << at::get_cpu_capability() << "\n  " << at::get_parallel_info();
  return os.str();
}

}  // namespace cpbench::test
