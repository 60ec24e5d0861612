#pragma once
// Process groups for CP ranks: a TCPStore rendezvous plus a c10d Gloo (CPU tensors) or NCCL (CUDA
// tensors, one GPU per rank) backend. This header and its .cpp are the only place that knows about
// Gloo or NCCL; everything else talks to c10d::Backend through Communicator.
//
// Ownership: a ProcessGroup owns its store and backend; it is move-only. Destroying it shuts the
// backend down (NCCL needs an explicit shutdown before exit).
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace cpbench::comm {

enum class BackendKind { gloo, nccl };

[[nodiscard]] const char* to_string(BackendKind kind);

struct RendezvousOptions {
  std::string master_addr = "127.0.0.1";
  std::uint16_t master_port = 0;
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  int gloo_threads = 1;  // ranks share the machine's cores; extra Gloo threads only contend
};

// The TCPStore every group of one job hangs off. Rank 0 hosts the server on master_port.
[[nodiscard]] c10::intrusive_ptr<c10d::Store> connect_store(const RendezvousOptions& options);

// Where Gloo listens: "if:<name>" when GLOO_SOCKET_IFNAME is set (the interface, as torch does); else
// the local address of the interface that routes to `master_addr` (a connected UDP socket's name, no
// packet sent): 127.0.0.1 on one machine, the node's own address across nodes.
[[nodiscard]] std::string gloo_bind_address(const std::string& master_addr);

// The NCCL version this LibTorch build carries ("2.28.9"), or "n/a" without NCCL.
[[nodiscard]] std::string nccl_version();

// Everything ProcessGroup::create needs besides the store, as one value: callers (and the GPU tests'
// argument builders, tests/gpu/gpu_cases.hpp) construct it, and group_spec_error says, without
// creating anything, whether create() would accept it.
struct GroupSpec {
  std::string name;
  std::vector<int> ranks;  // global ranks of the group, in group-rank order
  int global_rank = 0;
  BackendKind kind = BackendKind::gloo;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  int gloo_threads = 1;
  std::optional<at::Device> device;  // NCCL: the CUDA device with its index (required)
};

// "" when create() accepts `spec`; otherwise why not (not a member of its group, NCCL without a
// CUDA device with an index). Pure: no store, no device, no backend. The build's lack of NCCL is
// create()'s own error, not this one's.
[[nodiscard]] std::string group_spec_error(const GroupSpec& spec);

class ProcessGroup {
 public:
  // Throws cpbench::Error with group_spec_error's reason when it is not empty.
  static ProcessGroup create(const c10::intrusive_ptr<c10d::Store>& store, const GroupSpec& spec);

  // `ranks` lists the global ranks of the group (in group-rank order); this rank must be among them.
  // Every member must call with the same `name` and `ranks`; non-members need not call.
  // NCCL: `device` (required) is the GPU the group is bound to before its first collective (no
  // guessing from the current device); every collective of a Communicator on it runs on that device.
  // Gloo binds to gloo_bind_address(MASTER_ADDR from the environment, default 127.0.0.1).
  static ProcessGroup create(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name,
                             const std::vector<int>& ranks, int global_rank, BackendKind kind,
                             std::chrono::milliseconds timeout, int gloo_threads = 1,
                             std::optional<at::Device> device = std::nullopt);

  ProcessGroup(ProcessGroup&&) noexcept;
  ProcessGroup& operator=(ProcessGroup&&) noexcept;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  ~ProcessGroup();

  [[nodiscard]] c10d::Backend& backend() const { return *backend_; }
  [[nodiscard]] const c10::intrusive_ptr<c10d::Backend>& backend_ptr() const { return backend_; }
  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] BackendKind kind() const { return kind_; }
  [[nodiscard]] const std::vector<int>& global_ranks() const { return ranks_; }

 private:
  ProcessGroup() = default;
  c10::intrusive_ptr<c10d::Backend> backend_;
  int rank_ = 0;
  int size_ = 1;
  BackendKind kind_ = BackendKind::gloo;
  std::vector<int> ranks_;
};

}  // namespace cpbench::comm
