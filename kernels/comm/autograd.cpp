#include "kernels/comm/autograd.hpp"

#include <torch/torch.h>

#include "sharders/core/check.hpp"

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

// Blocks along `split` to ranks, received blocks concatenated along `concat` in rank order.
at::Tensor exchange_blocks(const Communicator& comm, const at::Tensor& t, int64_t split, int64_t concat) {
  const at::Tensor blocks = at::stack(t.chunk(comm.size(), split), 0).contiguous();  // [W, ...]
  const at::Tensor got = comm.all_to_all(blocks);
  return at::cat(got.unbind(0), concat);
}

class AllToAllFunction : public torch::autograd::Function<AllToAllFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const Communicator& comm, int64_t split,
                            int64_t concat) {
    ctx->saved_data["comm"] = make_saved_object(comm);
    ctx->saved_data["split"] = split;
    ctx->saved_data["concat"] = concat;
    return exchange_blocks(comm, x, split, concat);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& comm = saved_object<Communicator>(ctx->saved_data["comm"]);
    const int64_t split = ctx->saved_data["split"].toInt();
    const int64_t concat = ctx->saved_data["concat"].toInt();
    return {exchange_blocks(comm, grads[0], concat, split), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_to_all_autograd(const Communicator& comm, const at::Tensor& x, int64_t split_dim, int64_t concat_dim) {
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
  return AllToAllFunction::apply(x, comm, split, concat);
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

}  // namespace cpbench::comm
