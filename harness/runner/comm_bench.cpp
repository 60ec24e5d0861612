#include "harness/runner/comm_bench.hpp"

#include <algorithm>
#include <chrono>
#include <map>

#include "reports/statistics.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

double bus_factor(const std::string& collective, int64_t ranks) {
  const double n = static_cast<double>(std::max<int64_t>(1, ranks));
  if (collective == "all_reduce") return 2 * (n - 1) / n;
  if (collective == "sendrecv") return 1.0;
  if (collective == "all_gather" || collective == "reduce_scatter" || collective == "all_to_all") return (n - 1) / n;
  throw Error("bus_factor: unknown collective '" + collective + "'");
}

std::vector<CollectiveBandwidth> distinct_collectives(const comm::CallLog& log, size_t keep) {
  std::map<std::pair<std::string, int64_t>, int64_t> count;
  for (const auto& c : log)
    if (c.bytes >= 1024) ++count[{c.collective, c.bytes}];
  std::vector<CollectiveBandwidth> out;
  for (const auto& [key, n] : count) {
    CollectiveBandwidth b;
    b.collective = key.first;
    b.bytes = key.second;
    b.calls_per_step = n;
    out.push_back(b);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    const int64_t x = a.bytes * a.calls_per_step, y = b.bytes * b.calls_per_step;
    return x != y ? x > y : a.collective < b.collective;
  });
  if (out.size() > keep) out.resize(keep);
  return out;
}

namespace {

// One run of `c` at its size, as the step issued it (bytes as nccl-tests sizes them).
void run_once(const comm::Communicator& comm, const at::Device& device, const CollectiveBandwidth& c) {
  const int64_t W = comm.size();
  const auto bytes_tensor = [&](int64_t n) { return at::empty({std::max<int64_t>(n, 1)}, at::TensorOptions(at::kByte).device(device)); };
  if (c.collective == "all_gather") {
    (void)comm.all_gather(bytes_tensor(c.bytes / W));
  } else if (c.collective == "reduce_scatter") {
    // Sum needs a numeric type: float32 rows of the same byte count.
    (void)comm.reduce_scatter_sum(at::zeros({W, std::max<int64_t>(1, c.bytes / W / 4)}, at::TensorOptions(at::kFloat).device(device)));
  } else if (c.collective == "all_to_all") {
    (void)comm.all_to_all(bytes_tensor(c.bytes / W * W).view({W, -1}));
  } else if (c.collective == "all_reduce") {
    at::Tensor t = at::zeros({std::max<int64_t>(1, c.bytes / 4)}, at::TensorOptions(at::kFloat).device(device));
    comm.all_reduce_sum(t);
  } else if (c.collective == "sendrecv") {
    // The ring's step: send to the next rank, receive from the previous one.
    at::Tensor send = bytes_tensor(c.bytes), recv = bytes_tensor(c.bytes);
    auto ex = comm.post_exchange(send, static_cast<int>((comm.rank() + 1) % W), recv,
                                 static_cast<int>((comm.rank() + W - 1) % W));
    ex.wait();
  } else {
    throw Error("measure_collectives: unknown collective '" + c.collective + "'");
  }
}

}  // namespace

void measure_collectives(const comm::Communicator& comm, const at::Device& device,
                         std::vector<CollectiveBandwidth>& calls, int iters) {
  for (auto& c : calls) {
    run_once(comm, device, c);  // warm-up: connections, buffers
    std::vector<double> times;
    for (int i = 0; i < iters; ++i) {
      comm.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      run_once(comm, device, c);
      if (device.is_cuda()) comm.barrier();  // NCCL returns before the device finishes; the barrier follows it
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    at::Tensor t = at::tensor({stats::median(times)}, at::kDouble);
    if (comm.device()) t = t.to(*comm.device());
    comm.all_reduce_max(t);
    c.time_s = t.to(at::kCPU).item<double>();
    c.bus_factor = bus_factor(c.collective, comm.size());
    c.algbw = c.time_s > 0 ? static_cast<double>(c.bytes) / c.time_s : 0;
    c.busbw = c.algbw * c.bus_factor;
  }
}

}  // namespace cpbench
