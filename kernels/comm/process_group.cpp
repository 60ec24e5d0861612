// The one translation unit that includes the Gloo and NCCL process-group headers.
//
// Gloo's own headers come from Debian's libgloo-dev (the torch wheel does not ship them). Their
// gloo::rendezvous::Store vtable is not guaranteed to match the gloo compiled into libtorch, so this
// file never constructs gloo objects itself or calls gloo directly: it only constructs
// c10d::ProcessGroupGloo (whose constructor, compiled inside libtorch, builds the gloo context) and
// hands it out as c10d::Backend. tests/comm_test.cpp proves the combination with real processes.
#include "kernels/comm/process_group.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>

#include "sharders/core/check.hpp"

namespace cpbench::comm {

const char* to_string(BackendKind kind) { return kind == BackendKind::gloo ? "gloo" : "nccl"; }

c10::intrusive_ptr<c10d::Store> connect_store(const RendezvousOptions& o) {
  CP_CHECK(o.world_size >= 1 && o.rank >= 0 && o.rank < o.world_size, "rank ", o.rank,
           " is outside world size ", o.world_size);
  c10d::TCPStoreOptions opts;
  opts.port = o.master_port;
  opts.isServer = o.rank == 0;
  opts.numWorkers = static_cast<std::size_t>(o.world_size);
  opts.waitWorkers = true;
  opts.timeout = o.timeout;
  try {
    return c10::make_intrusive<c10d::TCPStore>(o.master_addr, opts);
  } catch (const std::exception& e) {
    throw Error(detail::concat("rank ", o.rank, ": cannot reach the rendezvous store at ", o.master_addr,
                               ":", o.master_port, " within ", o.timeout.count(), " ms: ", e.what()));
  }
}

ProcessGroup ProcessGroup::create(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name,
                                  const std::vector<int>& ranks, int global_rank, BackendKind kind,
                                  std::chrono::milliseconds timeout, int gloo_threads) {
  auto it = std::find(ranks.begin(), ranks.end(), global_rank);
  CP_CHECK(it != ranks.end(), "rank ", global_rank, " is not a member of process group '", name, "' ",
           shape_str(ranks));
  ProcessGroup pg;
  pg.rank_ = static_cast<int>(it - ranks.begin());
  pg.size_ = static_cast<int>(ranks.size());
  pg.kind_ = kind;
  pg.ranks_ = ranks;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name + "/", store);
  if (kind == BackendKind::gloo) {
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    opts->threads = std::max(1, gloo_threads);
    pg.backend_ = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, pg.rank_, pg.size_, opts);
  } else {
#ifdef USE_C10D_NCCL
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    pg.backend_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, pg.rank_, pg.size_, opts);
#else
    throw Error("this LibTorch build has no NCCL process group");
#endif
  }
  return pg;
}

ProcessGroup::ProcessGroup(ProcessGroup&&) noexcept = default;
ProcessGroup& ProcessGroup::operator=(ProcessGroup&&) noexcept = default;

ProcessGroup::~ProcessGroup() {
  if (!backend_) return;
  try {
    if (kind_ == BackendKind::nccl) backend_->shutdown();
  } catch (...) {
    // Shutdown during unwinding must not throw; the process is exiting anyway.
  }
}

}  // namespace cpbench::comm
