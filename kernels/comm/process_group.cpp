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

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

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

std::string nccl_version() {
#ifdef USE_C10D_NCCL
  return c10d::getNcclVersion();
#else
  return "n/a";
#endif
}

std::string gloo_bind_address(const std::string& master_addr) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    std::string first(ifname);  // torch accepts a comma-separated list; one device here
    return "if:" + first.substr(0, first.find(','));
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  CP_CHECK(::getaddrinfo(master_addr.c_str(), "9", &hints, &res) == 0 && res != nullptr,
           "MASTER_ADDR ", master_addr, " does not resolve to an IPv4 address");
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  std::string local = "127.0.0.1";
  if (fd >= 0) {
    sockaddr_in me{};
    socklen_t len = sizeof me;
    if (::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0) {
      char buf[INET_ADDRSTRLEN] = {};
      if (::inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf)) local = buf;
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return local;
}

std::string group_spec_error(const GroupSpec& s) {
  if (std::find(s.ranks.begin(), s.ranks.end(), s.global_rank) == s.ranks.end())
    return detail::concat("rank ", s.global_rank, " is not a member of process group '", s.name, "' ",
                          shape_str(s.ranks));
  if (s.kind == BackendKind::nccl && !(s.device && s.device->is_cuda() && s.device->has_index()))
    return detail::concat("process group '", s.name, "': NCCL needs the CUDA device it is bound to (got ",
                          s.device ? s.device->str() : std::string("no device"), ")");
  return "";
}

ProcessGroup ProcessGroup::create(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name,
                                  const std::vector<int>& ranks, int global_rank, BackendKind kind,
                                  std::chrono::milliseconds timeout, int gloo_threads,
                                  std::optional<at::Device> device) {
  return create(store, GroupSpec{name, ranks, global_rank, kind, timeout, gloo_threads, device});
}

ProcessGroup ProcessGroup::create(const c10::intrusive_ptr<c10d::Store>& store, const GroupSpec& spec) {
  const std::string why = group_spec_error(spec);
  CP_CHECK(why.empty(), why);
  const auto& ranks = spec.ranks;
  const auto it = std::find(ranks.begin(), ranks.end(), spec.global_rank);
  ProcessGroup pg;
  pg.rank_ = static_cast<int>(it - ranks.begin());
  pg.size_ = static_cast<int>(ranks.size());
  pg.kind_ = spec.kind;
  pg.ranks_ = ranks;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(spec.name + "/", store);
  if (spec.kind == BackendKind::gloo) {
    auto opts = c10d::ProcessGroupGloo::Options::create(spec.timeout);
    const char* master = std::getenv("MASTER_ADDR");
    const std::string where = gloo_bind_address(master && *master ? master : "127.0.0.1");
    opts->devices.push_back(where.rfind("if:", 0) == 0
                                ? c10d::ProcessGroupGloo::createDeviceForInterface(where.substr(3))
                                : c10d::ProcessGroupGloo::createDeviceForHostname(where));
    opts->threads = std::max(1, spec.gloo_threads);
    pg.backend_ = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, pg.rank_, pg.size_, opts);
  } else {
#ifdef USE_C10D_NCCL
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = spec.timeout;
    pg.backend_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, pg.rank_, pg.size_, opts);
    pg.backend_->setBoundDeviceId(spec.device);
    // Connect now, while every member is here creating the group: NCCL otherwise connects inside the
    // first collective, the case's first checked step, whose time would then include the connection.
    // (The wait for cp-rank 0's references is not a collective: the store hand-off of case_runner.hpp.)
    pg.backend_->eagerConnectSingleDevice(*spec.device);
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
