// cpbench command line. Parses argv (CLI11) into plain option structs and calls the library; every
// error becomes one readable line on stderr: exit 2 for bad input, 1 for a failed run.
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <iostream>

#include "cpbench/version.hpp"
#include "harness/layout_command.hpp"
#include "sharders/check.hpp"
#include "sharders/registry.hpp"

namespace {

std::string version_text() {
  std::ostringstream os;
  os << "cpbench " << cpbench::kVersion << " (commit " << cpbench::kGitCommit << "), torch " << TORCH_VERSION
     << ", CUDA " << (torch::cuda::is_available() ? "available (" + std::to_string(torch::cuda::device_count()) + " GPU)" : "not available");
  return os.str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cpbench: context-parallel sequence sharding, correctness and throughput"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text);

  cpbench::LayoutCommandOptions layout_opts;
  std::string doc_lens_text;
  auto* layout_cmd = app.add_subcommand("layout", "show which rank owns which token under a layout");
  layout_cmd->add_option("--sharder", layout_opts.sharder, "layout name: " + cpbench::known_layouts_text())->required();
  layout_cmd->add_option("--cp", layout_opts.cp, "CP world size W")->required();
  layout_cmd->add_option("--seq-len", layout_opts.seq_len, "sequence length S (tokens, before padding)");
  layout_cmd->add_option("--doc-lens", layout_opts.doc_lens, "document lengths for thd, e.g. 7,12,5")->delimiter(',');
  layout_cmd->add_option("--format", layout_opts.format, "table or json")->check(CLI::IsMember({"table", "json"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (*layout_cmd) return cpbench::run_layout_command(layout_opts);
  } catch (const cpbench::UsageError& e) {
    std::cerr << "cpbench: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "cpbench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
