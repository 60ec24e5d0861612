#pragma once
// Communicator: the collectives cpbench uses, on top of a c10d::Backend, with blocking semantics
// (every call waits for its Work). Tensors are passed contiguous; results are fresh tensors.
//
// Gloo handles CPU tensors for every call; NCCL handles CUDA tensors. Gloo cannot send/recv CUDA
// tensors: callers (the ring transport) stage through host memory when backend() is Gloo.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cpbench::comm {

// One collective a Communicator issued, as nccl-tests sizes it: `bytes` is the all-gather's output,
// the reduce-scatter's input, the all-to-all's (and all-reduce's) buffer on one rank, the bytes one
// rank sends in a send/receive exchange.
struct CollectiveCall {
  std::string collective;  // all_gather | reduce_scatter | all_to_all | all_reduce | sendrecv
  int64_t bytes = 0;
};
using CallLog = std::vector<CollectiveCall>;

class Communicator {
 public:
  // World of one without a backend: every collective is the identity. With a backend every call
  // issues the real collective, whatever the group's size.
  Communicator() = default;
  explicit Communicator(c10::intrusive_ptr<c10d::Backend> backend);

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] bool is_gloo() const;
  // The device every collective runs on (the NCCL group's bound GPU; nullopt: the tensors' own).
  // Tensors elsewhere (host-side counts, error maxima, barriers) are staged there and back.
  [[nodiscard]] const std::optional<at::Device>& device() const { return device_; }

  // [n, ...] on every rank -> [size * n, ...], rank r's block at rows [r*n, (r+1)*n).
  [[nodiscard]] at::Tensor all_gather(const at::Tensor& local) const;
  // [size * n, ...] -> [n, ...]: the sum over ranks of block `rank`.
  [[nodiscard]] at::Tensor reduce_scatter_sum(const at::Tensor& full) const;
  // All-to-all inside a group of this communicator's ranks. `peers` lists the group's ranks in
  // ascending order and contains this rank; `local` is [P * n, ...] with P = peers.size(): block i (rows
  // [i*n, (i+1)*n)) goes to rank peers[i]; the result has the same shape, block i received from
  // peers[i]. Collective over the WHOLE communicator: every rank calls it with its own group, and the
  // groups partition the ranks (one W-wide all-to-all whose splits are 0 outside each group, so disjoint
  // groups exchange in one call without sub-communicators). Raw bytes travel (every dtype, exact).
  // Bytes this rank sends: (P - 1) * n rows.
  [[nodiscard]] at::Tensor all_to_all(const at::Tensor& local, const std::vector<int>& peers) const;
  // The whole communicator as one group: all_to_all(blocks, {0, 1, ..., size - 1}).
  [[nodiscard]] at::Tensor all_to_all(const at::Tensor& blocks) const;
  // In place.
  void all_reduce_sum(at::Tensor& t) const;
  void all_reduce_max(at::Tensor& t) const;
  void send(const at::Tensor& t, int dst, int tag = 0) const;
  void recv(at::Tensor& t, int src, int tag = 0) const;
  // Posted send and receive of one exchange step; wait() completes both.
  struct Exchange {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    void wait();
  };
  // An empty send_buf or recv_buf (numel 0) is not posted: its side of the exchange is skipped (the
  // peer must skip its matching side too).
  [[nodiscard]] Exchange post_exchange(const at::Tensor& send_buf, int dst, at::Tensor& recv_buf, int src,
                                       int tag = 0) const;
  void barrier() const;

  [[nodiscard]] const c10::intrusive_ptr<c10d::Backend>& backend() const { return backend_; }
  // While set, every collective of this communicator and of its copies made meanwhile (the autograd
  // nodes of a step keep copies for their backward) is appended to `log`. Null: nothing is recorded.
  void set_call_log(std::shared_ptr<CallLog> log) { log_ = std::move(log); }

 private:
  c10::intrusive_ptr<c10d::Backend> backend_;
  [[nodiscard]] at::Tensor staged(const at::Tensor& t) const;
  void logged(const char* collective, const at::Tensor& t) const;
  std::shared_ptr<CallLog> log_;
  int rank_ = 0;
  int size_ = 1;
  std::optional<at::Device> device_;
};

}  // namespace cpbench::comm
