#include "kernels/comm/communicator.hpp"

#include "sharders/core/check.hpp"

namespace cpbench::comm {

Communicator::Communicator(c10::intrusive_ptr<c10d::Backend> backend)
    : backend_(std::move(backend)), rank_(backend_->getRank()), size_(backend_->getSize()) {
  if (backend_->getBackendName() == "nccl") {
    device_ = backend_->getBoundDeviceId();
    CP_CHECK(device_.has_value(), "an NCCL communicator needs a group bound to its device (ProcessGroup::create)");
  }
}

at::Tensor Communicator::staged(const at::Tensor& t) const {
  return device_ && t.device() != *device_ ? t.to(*device_).contiguous() : t.contiguous();
}

void Communicator::logged(const char* collective, const at::Tensor& t) const {
  if (log_) log_->push_back({collective, static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size())});
}

bool Communicator::is_gloo() const { return backend_ && backend_->getBackendName() == "gloo"; }

at::Tensor Communicator::all_gather(const at::Tensor& local) const {
  if (!backend_) return local;
  at::Tensor in = staged(local);
  std::vector<int64_t> shape = in.sizes().vec();
  CP_CHECK(!shape.empty(), "all_gather needs at least one dimension");
  shape[0] *= size_;
  at::Tensor out = at::empty(shape, in.options());
  // Gloo's _allgather_base needs no coalescing; one Work per call.
  logged("all_gather", out);
  backend_->_allgather_base(out, in)->wait();
  return out.to(local.device());
}

at::Tensor Communicator::reduce_scatter_sum(const at::Tensor& full) const {
  if (!backend_) return full;
  at::Tensor in = staged(full);
  CP_CHECK(in.dim() >= 1 && in.size(0) % size_ == 0, "reduce_scatter: leading dim ", in.size(0),
           " of shape ", shape_str(in.sizes()), " is not divisible by world size ", size_, " (rank ", rank_,
           ")");
  std::vector<int64_t> shape = in.sizes().vec();
  shape[0] /= size_;
  at::Tensor out = at::empty(shape, in.options());
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = c10d::ReduceOp::SUM;
  logged("reduce_scatter", in);
  backend_->_reduce_scatter_base(out, in, opts)->wait();
  return out.to(full.device());
}

at::Tensor Communicator::all_to_all(const at::Tensor& local, const std::vector<int>& peers) const {
  const auto P = static_cast<int64_t>(peers.size());
  CP_CHECK(P >= 1 && local.dim() >= 1 && local.size(0) % P == 0, "all_to_all: leading dim of shape ",
           shape_str(local.sizes()), " is not divisible by the group size ", P, " (rank ", rank_, ")");
  bool member = false;
  for (int64_t i = 0; i < P; ++i) {
    const int p = peers[static_cast<size_t>(i)];
    CP_CHECK(p >= 0 && p < size_ && (i == 0 || p > peers[static_cast<size_t>(i - 1)]), "all_to_all: group ranks must be "
             "ascending and in [0, ", size_, "), got ", p, " at position ", i, " (rank ", rank_, ")");
    member = member || p == rank_;
  }
  CP_CHECK(member, "all_to_all: rank ", rank_, " is not in its own group");
  if (!backend_ || P == 1) return local.contiguous().clone();
  // Gloo moves host memory only: device tensors (ranks sharing a GPU) are staged through the host.
  at::Tensor in = is_gloo() ? local.to(at::kCPU).contiguous() : staged(local).contiguous();
  at::Tensor out = at::empty_like(in);
  // Split sizes in rows of dim 0, per rank of the communicator: n for the group, 0 elsewhere.
  const int64_t n = in.size(0) / P;
  std::vector<int64_t> splits;
  if (P != size_) {
    splits.assign(static_cast<size_t>(size_), 0);
    for (int p : peers) splits[static_cast<size_t>(p)] = n;
  }
  std::vector<int64_t> out_splits = splits;
  // [rows, bytes]: the split sizes count rows of dim 0 whatever the dtype and rank of the tensor.
  at::Tensor in_bytes = in.view({in.size(0), -1}).view(at::kByte);
  at::Tensor out_bytes = out.view({out.size(0), -1}).view(at::kByte);
  logged("all_to_all", in);
  backend_->alltoall_base(out_bytes, in_bytes, out_splits, splits)->wait();
  return out.to(local.device());
}

at::Tensor Communicator::all_to_all(const at::Tensor& blocks) const {
  std::vector<int> everyone(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) everyone[static_cast<size_t>(r)] = r;
  return all_to_all(blocks, everyone);
}

void Communicator::all_reduce_sum(at::Tensor& t) const {
  if (!backend_) return;
  CP_CHECK(t.is_contiguous(), "all_reduce needs a contiguous tensor, got shape ", shape_str(t.sizes()));
  std::vector<at::Tensor> ts{staged(t)};
  logged("all_reduce", t);
  backend_->allreduce(ts)->wait();
  if (!ts[0].is_same(t)) t.copy_(ts[0]);
}

void Communicator::all_reduce_max(at::Tensor& t) const {
  if (!backend_) return;
  CP_CHECK(t.is_contiguous(), "all_reduce needs a contiguous tensor, got shape ", shape_str(t.sizes()));
  std::vector<at::Tensor> ts{staged(t)};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  backend_->allreduce(ts, opts)->wait();
  if (!ts[0].is_same(t)) t.copy_(ts[0]);
}

void Communicator::send(const at::Tensor& t, int dst, int tag) const {
  std::vector<at::Tensor> ts{t.contiguous()};
  backend_->send(ts, dst, tag)->wait();
}

void Communicator::recv(at::Tensor& t, int src, int tag) const {
  CP_CHECK(t.is_contiguous(), "recv needs a contiguous buffer");
  std::vector<at::Tensor> ts{t};
  backend_->recv(ts, src, tag)->wait();
}

Communicator::Exchange Communicator::post_exchange(const at::Tensor& send_buf, int dst, at::Tensor& recv_buf,
                                                   int src, int tag) const {
  Exchange ex;
  const bool sending = send_buf.numel() > 0, receiving = recv_buf.numel() > 0;
  if (sending) logged("sendrecv", send_buf);
  std::vector<at::Tensor> s{send_buf};
  std::vector<at::Tensor> r{recv_buf};
  if (!sending || !receiving) {  // one side only (a halo exchange's empty half), or nothing
    if (receiving) ex.works.push_back(backend_->recv(r, src, tag));
    if (sending) ex.works.push_back(backend_->send(s, dst, tag));
  } else if (is_gloo()) {
    // Gloo has no coalescing: post the receive first so a rendezvous-style transport never waits on
    // an unposted receive; both run on Gloo's own threads.
    ex.works.push_back(backend_->recv(r, src, tag));
    ex.works.push_back(backend_->send(s, dst, tag));
  } else {
    // NCCL: a receive and a send to the same peer share one stream; issued separately, both ranks'
    // receives would wait on sends queued behind them. One group (coalesced) call posts them together.
    backend_->startCoalescing();
    backend_->recv(r, src, tag);
    backend_->send(s, dst, tag);
    ex.works.push_back(backend_->endCoalescing());
  }
  return ex;
}

void Communicator::Exchange::wait() {
  for (auto& w : works) w->wait();
  works.clear();
}

void Communicator::barrier() const {
  if (!backend_) return;
  // NCCL's barrier is an all-reduce on the bound device (no device guessing).
  backend_->barrier()->wait();
}

}  // namespace cpbench::comm
