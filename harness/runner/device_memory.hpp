#pragma once
// The visible CUDA devices' free and total memory, for device: cuda admission (admission.hpp
// admit_device). `cpbench run` asks a child process (`cpbench _device_memory`), so that the launcher
// itself never holds a CUDA context on the GPUs its ranks are about to fill.
#include <string>
#include <vector>

#include "harness/runner/admission.hpp"

namespace cpbench {

// This process: cudaMemGetInfo on every visible device (creates a context on each). Empty without a
// GPU.
[[nodiscard]] std::vector<GpuMemory> query_gpu_memory();

// The `_device_memory` subcommand's output, one line per device: "<free bytes> <total bytes> <name>".
[[nodiscard]] std::string format_gpu_memory(const std::vector<GpuMemory>& gpus);
// Parses it back; throws Error naming the line it cannot read.
[[nodiscard]] std::vector<GpuMemory> parse_gpu_memory(const std::string& text);

// Runs `executable _device_memory` and parses its output; throws Error (naming the command and its exit
// status) when it fails.
[[nodiscard]] std::vector<GpuMemory> gpu_memory_from_child(const std::string& executable);

}  // namespace cpbench
