#pragma once
// Differentiable collectives over a Communicator (LibTorch has no C++ autograd functional
// collectives, so cpbench carries its own), and the helper that lets an autograd node own C++ state.
//
// all_gather_autograd(comm, local, dim):
//   forward:  every rank passes `local` of the same shape; returns the concatenation of all ranks'
//             tensors along `dim` in rank order (rank r's block at [r*n, (r+1)*n) of that dim).
//             Contiguous, same dtype and device as `local`.
//   backward: the gradient of the concatenation is reduce-scattered with SUM: rank r receives the sum
//             over ranks of block r. With a loss that is the sum of every rank's loss (or one
//             normalized by a global count), each rank gets exactly d(total)/d(local).
//   Every rank must call it, and run its backward, in the same order: it is a collective both ways.
//   A world of one returns `local` itself.
//
// Lifetime: the autograd node keeps its own copy of the Communicator (one reference on the c10d
// backend) until the graph is freed, so the caller's Communicator may be a temporary.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/comm/communicator.hpp"
#include "kernels/comm/device_time.hpp"

namespace cpbench::comm {

[[nodiscard]] at::Tensor all_gather_autograd(const Communicator& comm, const at::Tensor& local, int64_t dim = 0);

// What an all-to-all reports, forward and backward: each one runs inside the NVTX range
// "<nvtx_prefix>:a2a" and then calls `done` (if set) with the bytes this rank sent and the seconds the
// call took. Copied into the autograd node, so whatever `done` captures must outlive the backward.
// On a CUDA tensor with `done_on_device` set, that is called instead, with two DeviceTimes (events on
// the current stream around the call): under NCCL, Work::wait blocks the stream, not the host, so the
// host clock would time the launch; the events are read after the step (resolve_device_times).
struct AllToAllObserver {
  std::string nvtx_prefix;
  std::function<void(int64_t bytes_sent, double seconds)> done;
  std::function<void(int64_t bytes_sent, const DeviceTime& begin, const DeviceTime& end)> done_on_device{};
};

// all_to_all_autograd(comm, local, peers, observer):
//   forward:  Communicator::all_to_all(local, peers) ([P * n, ...]: block i to peers[i], block i of the
//             result from peers[i]); collective over the whole communicator, every rank with its group.
//   backward: the same all-to-all of the gradient (it is its own inverse: the block rank a sent to b
//             comes back from b to a's slot b), so each rank gets exactly the gradient of its blocks.
//   A group of one returns `local` (no copy, no observer call).
[[nodiscard]] at::Tensor all_to_all_autograd(const Communicator& comm, const at::Tensor& local,
                                             const std::vector<int>& peers, const AllToAllObserver& observer = {});

// group_all_gather_autograd(comm, local, peers, grad_dtype, observer):
//   forward:  every peer's `local` (same shape), stacked in `peers` order: [P, ...local] (an all-to-all
//             of P copies of `local`, so the observer sees (P-1) copies sent).
//   backward: block i of the gradient goes back to peers[i] in `grad_dtype` (e.g. float32 for 16-bit
//             inputs), and the P blocks received are summed: a reduce-scatter (SUM) over the group.
//   A group of one returns local.unsqueeze(0) (no exchange).
[[nodiscard]] at::Tensor group_all_gather_autograd(const Communicator& comm, const at::Tensor& local,
                                                   const std::vector<int>& peers, at::ScalarType grad_dtype,
                                                   const AllToAllObserver& observer = {});

// all_to_all_autograd(comm, x, split_dim, concat_dim):
//   forward:  `x` is cut into W equal blocks along `split_dim` (its size must divide by W); block q
//             goes to rank q. The result concatenates, along `concat_dim`, the blocks received from
//             ranks 0..W-1 in rank order. Every rank passes the same shape; the result has
//             size(split_dim) / W and size(concat_dim) * W (when the two dims differ).
//             E.g. sequence -> hidden parallel: [B, S/W, D] with split_dim 2, concat_dim 1 -> [B, S, D/W]
//             (the sequence in rank order: rank q's tokens at [q*S/W, (q+1)*S/W)).
//   backward: the reverse all-to-all (split the gradient along concat_dim, concatenate along split_dim).
//   A collective both ways, like all_gather_autograd. A world of one returns `x` itself.
//   The whole communicator as the group of the all-to-all below (the same collective and backward),
//   cut and concatenated along tensor dims: the hidden-parallel SSM layers use it.
[[nodiscard]] at::Tensor all_to_all_autograd(const Communicator& comm, const at::Tensor& x, int64_t split_dim,
                                             int64_t concat_dim, const AllToAllObserver& observer = {});

// An IValue that owns a copy of `value`, for AutogradContext::saved_data. IValues hold tensors and
// scalars but not C++ objects; a capsule around a CustomClassHolder is the one slot that does. Why
// not a global registry of ids: raw pointers dangle when the caller's object was a temporary, and
// strong or weak references in a process-wide table would keep every c10d backend undestroyed
// until static destruction (a weak intrusive_ptr defers the destructor too). The capsule lives
// exactly as long as the node that saved it.
template <typename T>
struct SavedObject : torch::CustomClassHolder {
  explicit SavedObject(T v) : value(std::move(v)) {}
  T value;
};

template <typename T>
[[nodiscard]] c10::IValue make_saved_object(T value) {
  return c10::IValue::make_capsule(c10::make_intrusive<SavedObject<T>>(std::move(value)));
}

// The object saved by make_saved_object<T>; the reference lives as long as `saved`'s owner.
template <typename T>
[[nodiscard]] const T& saved_object(const c10::IValue& saved) {
  auto* holder = static_cast<const SavedObject<T>*>(saved.toCapsule().get());
  return holder->value;
}

}  // namespace cpbench::comm

namespace cpbench {
using comm::all_gather_autograd;
using comm::all_to_all_autograd;
}  // namespace cpbench
