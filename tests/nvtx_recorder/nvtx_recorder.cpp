// An NVTX3 injection library that records every range pushed and popped, so a test (or a user without
// Nsight Systems) can see cpbench's `cp:<sharder>:<phase>` ranges. NVTX3 is header-only: on the first
// NVTX call a process loads the library named by NVTX_INJECTION64_PATH and calls its
// InitializeInjectionNvtx2, which fills the process's NVTX function tables with the handlers below.
//
// Output: one file per process, $CPBENCH_NVTX_RECORD_DIR/nvtx-<pid>.tsv (the current directory when the
// variable is unset), created at the first range:
//   # pid <pid> rank <$RANK or ->
//   push <TAB> <thread id> <TAB> <ns, CLOCK_MONOTONIC> <TAB> <domain or -> <TAB> <message>
//   pop  <TAB> <thread id> <TAB> <ns> <TAB> <domain or ->
// docs/timeline.md describes it. Handles the core (nvtxRangePushA / PushEx / Pop) and the domain API
// (nvtxDomainRangePushEx / Pop, which nvtx3::scoped_range uses, with ASCII or registered messages).
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace {

std::mutex g_mutex;
std::FILE* g_file = nullptr;
thread_local int t_depth = 0;

long long now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

long thread_id() { return static_cast<long>(::syscall(SYS_gettid)); }

void flush_at_exit() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_file) std::fflush(g_file);
}

// Under g_mutex.
std::FILE* file() {
  if (g_file) return g_file;
  const char* dir = std::getenv("CPBENCH_NVTX_RECORD_DIR");
  const std::string path = std::string(dir && *dir ? dir : ".") + "/nvtx-" + std::to_string(::getpid()) + ".tsv";
  g_file = std::fopen(path.c_str(), "w");
  if (!g_file) {
    std::fprintf(stderr, "nvtx_recorder: cannot write %s\n", path.c_str());
    return nullptr;
  }
  const char* rank = std::getenv("RANK");
  std::fprintf(g_file, "# pid %d rank %s\n", static_cast<int>(::getpid()), rank && *rank ? rank : "-");
  std::atexit(flush_at_exit);
  return g_file;
}

// Domains and registered strings are handed out as pointers to strings that live for the process.
const char* domain_name(nvtxDomainHandle_t d) { return d ? reinterpret_cast<const std::string*>(d)->c_str() : "-"; }

std::string message(const nvtxEventAttributes_t* a) {
  if (!a) return "";
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      return a->message.ascii ? a->message.ascii : "";
    case NVTX_MESSAGE_TYPE_REGISTERED:
      return a->message.registered ? *reinterpret_cast<const std::string*>(a->message.registered) : "";
    case NVTX_MESSAGE_TYPE_UNICODE:
      return "<unicode message>";
    default:
      return "";
  }
}

int push(nvtxDomainHandle_t domain, const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (std::FILE* f = file())
    std::fprintf(f, "push\t%ld\t%lld\t%s\t%s\n", thread_id(), now_ns(), domain_name(domain), name.c_str());
  return t_depth++;
}

int pop(nvtxDomainHandle_t domain) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (std::FILE* f = file()) {
    std::fprintf(f, "pop\t%ld\t%lld\t%s\n", thread_id(), now_ns(), domain_name(domain));
    if (t_depth <= 1) std::fflush(f);  // a finished top-level range is on disk even if the process dies later
  }
  return t_depth > 0 ? --t_depth : -1;
}

int NVTX_API range_push_a(const char* m) { return push(nullptr, m ? m : ""); }
int NVTX_API range_push_ex(const nvtxEventAttributes_t* a) { return push(nullptr, message(a)); }
int NVTX_API range_pop() { return pop(nullptr); }
int NVTX_API domain_range_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) { return push(d, message(a)); }
int NVTX_API domain_range_pop(nvtxDomainHandle_t d) { return pop(d); }
nvtxDomainHandle_t NVTX_API domain_create_a(const char* name) {
  return reinterpret_cast<nvtxDomainHandle_t>(new std::string(name ? name : ""));
}
nvtxStringHandle_t NVTX_API domain_register_string_a(nvtxDomainHandle_t, const char* s) {
  return reinterpret_cast<nvtxStringHandle_t>(new std::string(s ? s : ""));
}

template <class F>
bool set(NvtxFunctionTable table, unsigned int size, unsigned int id, F* fn) {
  if (!table || id >= size || !table[id]) return false;
  *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
  return true;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  if (!callbacks || !callbacks->GetModuleFunctionTable) return 0;
  NvtxFunctionTable core = nullptr, core2 = nullptr;
  unsigned int core_size = 0, core2_size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size)) return 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size)) return 0;
  bool ok = set(core, core_size, NVTX_CBID_CORE_RangePushA, &range_push_a);
  ok = set(core, core_size, NVTX_CBID_CORE_RangePushEx, &range_push_ex) && ok;
  ok = set(core, core_size, NVTX_CBID_CORE_RangePop, &range_pop) && ok;
  ok = set(core2, core2_size, NVTX_CBID_CORE2_DomainRangePushEx, &domain_range_push_ex) && ok;
  ok = set(core2, core2_size, NVTX_CBID_CORE2_DomainRangePop, &domain_range_pop) && ok;
  ok = set(core2, core2_size, NVTX_CBID_CORE2_DomainCreateA, &domain_create_a) && ok;
  ok = set(core2, core2_size, NVTX_CBID_CORE2_DomainRegisterStringA, &domain_register_string_a) && ok;
  return ok ? 1 : 0;
}
