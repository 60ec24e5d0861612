#include "kernels/comm/autograd.hpp"

#include <torch/torch.h>

#include <chrono>

#include "sharders/core/check.hpp"
#include "sharders/core/nvtx.hpp"

namespace cpbench::comm {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Communicator collectives work on dim 0 of a contiguous tensor: move `dim` to the front and back.
at::Tensor gather_along(const Communicator& comm, const at::Tensor& t, int64_t dim) {
  at::Tensor front = t.movedim(dim, 0).contiguous();
  return comm.all_gather(front).movedim(0, dim).contiguous();
}

at::Tensor reduce_scatter_along(const Communicator& comm, const at::Tensor& t, int64_t dim) {
  at::Tensor front = t.movedim(dim, 0).contiguous();
  return comm.reduce_scatter_sum(front).movedim(0, dim).contiguous();
}

class AllGatherFunction : public torch::autograd::Function<AllGatherFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& local, const Communicator& comm, int64_t dim) {
    ctx->saved_data["comm"] = make_saved_object(comm);
    ctx->saved_data["dim"] = dim;
    return gather_along(comm, local, dim);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& comm = saved_object<Communicator>(ctx->saved_data["comm"]);
    const int64_t dim = ctx->saved_data["dim"].toInt();
    // Grads are materialized (zeros when the output was unused), so every rank always enters the
    // reduce-scatter and the collective stays matched.
    return {reduce_scatter_along(comm, grads[0], dim), at::Tensor(), at::Tensor()};
  }
};

struct AllToAllSpec {
  Communicator comm;
  std::vector<int> peers;
  AllToAllObserver observer;
};

at::Tensor observed_all_to_all(const AllToAllSpec& s, const at::Tensor& t) {
  nvtx::Range range{s.observer.nvtx_prefix, "a2a"};
  const auto P = static_cast<int64_t>(s.peers.size());
  const auto bytes = static_cast<int64_t>(t.nbytes()) / P * (P - 1);
  if (t.is_cuda() && s.observer.done_on_device) {
    const DeviceTime begin = DeviceTime::now(t.device());
    at::Tensor out = s.comm.all_to_all(t, s.peers);
    s.observer.done_on_device(bytes, begin, DeviceTime::now(t.device()));
    return out;
  }
  const auto start = std::chrono::steady_clock::now();
  at::Tensor out = s.comm.all_to_all(t, s.peers);
  if (s.observer.done)
    s.observer.done(bytes, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return out;
}

class AllToAllFunction : public torch::autograd::Function<AllToAllFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& local, const AllToAllSpec& spec) {
    ctx->saved_data["spec"] = make_saved_object(spec);
    return observed_all_to_all(spec, local);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& spec = saved_object<AllToAllSpec>(ctx->saved_data["spec"]);
    // Materialized gradients (zeros when unused) keep the collective matched on every rank.
    return {observed_all_to_all(spec, grads[0].contiguous()), at::Tensor()};
  }
};

// The all-gather inside `peers` as an all-to-all of P copies of `local`; its backward sends each peer
// the gradient of its copy (in grad_dtype) and sums what comes back: a reduce-scatter.
class GroupAllGatherFunction : public torch::autograd::Function<GroupAllGatherFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& local, const AllToAllSpec& spec,
                            at::ScalarType grad_dtype) {
    ctx->saved_data["spec"] = make_saved_object(spec);
    ctx->saved_data["grad_dtype"] = static_cast<int64_t>(grad_dtype);
    const auto P = static_cast<int64_t>(spec.peers.size());
    std::vector<int64_t> copies{P};
    copies.insert(copies.end(), local.sizes().begin(), local.sizes().end());
    return observed_all_to_all(spec, local.unsqueeze(0).expand(copies).contiguous());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& spec = saved_object<AllToAllSpec>(ctx->saved_data["spec"]);
    const auto gd = static_cast<at::ScalarType>(ctx->saved_data["grad_dtype"].toInt());
    const at::Tensor back = observed_all_to_all(spec, grads[0].to(gd).contiguous());
    return {back.sum(0).to(grads[0].scalar_type()), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_to_all_autograd(const Communicator& comm, const at::Tensor& local, const std::vector<int>& peers,
                               const AllToAllObserver& observer) {
  CP_CHECK(local.defined() && local.dim() >= 1, "all_to_all_autograd: needs a defined tensor with a dimension (rank ",
           comm.rank(), ")");
  if (peers.size() == 1) return local;
  return AllToAllFunction::apply(local, AllToAllSpec{comm, peers, observer});
}

at::Tensor all_to_all_autograd(const Communicator& comm, const at::Tensor& x, int64_t split_dim, int64_t concat_dim,
                               const AllToAllObserver& observer) {
  CP_CHECK(x.defined(), "all_to_all_autograd: undefined tensor (rank ", comm.rank(), ")");
  const auto norm = [&](int64_t d, const char* what) {
    const int64_t n = d < 0 ? d + x.dim() : d;
    CP_CHECK(n >= 0 && n < x.dim(), "all_to_all_autograd: ", what, " ", d, " is out of range for shape ",
             shape_str(x.sizes()), " (rank ", comm.rank(), ")");
    return n;
  };
  const int64_t split = norm(split_dim, "split_dim"), concat = norm(concat_dim, "concat_dim");
  CP_CHECK(x.size(split) % comm.size() == 0, "all_to_all_autograd: split dim ", split, " of shape ",
           shape_str(x.sizes()), " is not divisible by the world size ", comm.size(), " (rank ", comm.rank(), ")");
  if (comm.size() == 1) return x;
  // [W, ...]: block q (along `split`) for rank q; the group all-to-all above moves them (its backward
  // is the same exchange), and stack / unbind / cat carry the gradient back through the reshaping.
  std::vector<int> everyone(static_cast<size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) everyone[static_cast<size_t>(r)] = r;
  const at::Tensor got = all_to_all_autograd(comm, at::stack(x.chunk(comm.size(), split), 0), everyone, observer);
  return at::cat(got.unbind(0), concat);
}

at::Tensor all_gather_autograd(const Communicator& comm, const at::Tensor& local, int64_t dim) {
  CP_CHECK(local.defined(), "all_gather_autograd: undefined tensor (rank ", comm.rank(), ")");
  CP_CHECK(local.dim() >= 1, "all_gather_autograd: needs at least one dimension (rank ", comm.rank(), ")");
  const int64_t d = dim < 0 ? dim + local.dim() : dim;
  CP_CHECK(d >= 0 && d < local.dim(), "all_gather_autograd: dim ", dim, " is out of range for shape ",
           shape_str(local.sizes()), " (rank ", comm.rank(), ")");
  if (comm.size() == 1) return local;
  return AllGatherFunction::apply(local, comm, d);
}

at::Tensor group_all_gather_autograd(const Communicator& comm, const at::Tensor& local, const std::vector<int>& peers,
                                     at::ScalarType grad_dtype, const AllToAllObserver& observer) {
  CP_CHECK(local.defined(), "group_all_gather_autograd: undefined tensor (rank ", comm.rank(), ")");
  if (peers.size() == 1) return local.unsqueeze(0);
  return GroupAllGatherFunction::apply(local, AllToAllSpec{comm, peers, observer}, grad_dtype);
}

}  // namespace cpbench::comm
