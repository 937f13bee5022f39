// impl.cpp: torch's DistAutogradContainer served by distautograd
// (libdistautograd_torch_impl_<version>.so, built once per served torch,
// against that torch's own headers: DAT_TORCH_VERSION says which). The shim
// (shim.c) loads it on the first container call of a process whose libtorch
// is the one it was built for, and jumps here for every public member of
// the container. Each function below has the member's ABI: the object
// (ignored: distautograd's container is process-wide, as torch's singleton
// is) comes first, after the hidden pointer of a returned shared_ptr.
// (DistEngine::getDebugInfo stays libtorch's: it reads the container
// through these members.)
//
// distautograd owns the ids, the map, every thread's current id, message
// ids, the release fan-out and the counts. libtorch keeps its
// DistAutogradContext objects (send/recv functions, graph task, outstanding
// RPCs, gradients): one hangs on each distautograd context as its host
// value, a Box whose own reference the drop lets go when the context's last
// reference goes, so the object lives exactly as long as distautograd's
// context (and as long as torch holds its own copies).
//
// The object is built in place by libtorch's exported constructor and torn
// down by libtorch's own code: the disposer of the shared_ptr control block
// libtorch's make_shared uses for it (its destructor is inline there, so
// that is the only compiled copy), reached through that control block's
// vtable, which libtorch exports. Neither needs the class's layout, only an
// upper bound of its size, which probe() takes from a block libtorch's own
// factory made. (The factory itself, getOrCreateContext then
// releaseContextIfPresent on the id, costs two locks, an insert and an
// erase in libtorch's map per context: docs/performance.md, "The torch
// cycle".)
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/distributed/rpc/rpc_agent.h>
#include <torch/csrc/distributed/rpc/rpc_command_base.h>

#include <distautograd.h>

#include "say.h"
#include "symbols.h"

#ifndef DAT_TORCH_VERSION
#error "DAT_TORCH_VERSION (the torch release this is built for, \"2.6\") must be defined: see the Makefile"
#endif

// The headers are the named torch's: an implementation built against one
// torch's headers and named for another would be loaded for the wrong one.
constexpr bool same_text(const char* a, const char* b) {
  return *a == *b && (*a == 0 || same_text(a + 1, b + 1));
}
#define DAT_STR2(x) #x
#define DAT_STR(x) DAT_STR2(x)
static_assert(same_text(DAT_TORCH_VERSION, DAT_STR(TORCH_VERSION_MAJOR) "." DAT_STR(TORCH_VERSION_MINOR)),
              "DAT_TORCH_VERSION is not the version of the torch headers this is compiled against");

#if __has_include(<torch/csrc/distributed/autograd/context/container.h>)
// torch 2.x's libtorch-dev installs the classes' own headers.
#define DAT_TORCH_HEADERS 1
#include <torch/csrc/distributed/autograd/context/container.h>
#include <torch/csrc/distributed/autograd/context/context.h>
#include <torch/csrc/distributed/autograd/rpc_messages/cleanup_autograd_context_req.h>
#else
#define DAT_TORCH_HEADERS 0
namespace torch {
namespace distributed {
namespace autograd {

// torch 1.13's, which its libtorch-dev does not install: restated from
// torch/csrc/distributed/autograd/context/context.h and
// rpc_messages/cleanup_autograd_context_req.h. Only the exported members
// are called; a DistAutogradContext is only ever held by shared_ptr (its
// control block, libtorch's, destroys it).
class DistAutogradContext {
 public:
  explicit DistAutogradContext(int64_t contextId);
  int64_t contextId() const;
  void addKnownWorkerId(const rpc::worker_id_t workerId);
  std::unordered_set<rpc::worker_id_t> getKnownWorkerIds() const;
};

class CleanupAutogradContextReq : public rpc::RpcCommandBase {
 public:
  explicit CleanupAutogradContextReq(int64_t context_id);
  c10::intrusive_ptr<rpc::Message> toMessageImpl() && override;
  int64_t getContextId();

 private:
  int64_t context_id_;
};

}  // namespace autograd
}  // namespace distributed
}  // namespace torch
#endif

// libtorch's control block for make_shared<DistAutogradContext>: its vtable
// (exported, weak), whose third slot, _M_dispose(this), destroys the object
// at this + 16 and frees nothing.
extern void* const torch_context_block_vtable[] __asm__(
    "_ZTVSt23_Sp_counted_ptr_inplaceIN5torch11distributed8autograd19DistAutogradContextESaIvELN9__gnu_cxx12_"
    "Lock_policyE2EE");

namespace {

namespace ta = torch::distributed::autograd;
namespace rpc = torch::distributed::rpc;
using ContextPtr = std::shared_ptr<ta::DistAutogradContext>;

// libtorch's own definitions, by the ABI of their members.
struct Real {
  void* (*init)(int64_t);
  void* (*getInstanceInternal)();
  ContextPtr (*getOrCreateContext)(void*, int64_t);
  void (*releaseContextIfPresent)(void*, int64_t);
  size_t (*numAutogradContexts)(const void*);
} real;

// libtorch's container: initialized with the worker id, it makes the
// DistAutogradContext objects; it holds one only for the length of that.
std::atomic<void*> instance{nullptr};
std::mutex init_mu;
// The counts dat_impl_debug_info shows, written by every creation and cleanup
// send: on lines of their own, away from what every member reads (instance,
// real, exiting).
struct alignas(64) Counts {
  std::atomic<int64_t> cleanup_handed{0}, cleanup_delivered{0}, cleanup_torch_failed{0}, made{0}, destroyed{0};
  // Cleanup messages dropped: their worker was found gone.
  std::atomic<int64_t> cleanup_gone{0};
  // The origin check's (check_origins): probes sent, workers found gone
  // (by a probe or a cleanup message), contexts of their passes released.
  std::atomic<int64_t> origin_probes{0}, workers_gone{0}, orphans_released{0};
} counts;
std::atomic<bool> exiting{false};
// DISTAUTOGRAD_REAP_IDLE_MS, when the reaper runs (start_reaper); else 0.
std::atomic<long long> reap_idle_ms{0};
// The reaped current id this thread was last told about: the pass that
// failed gets one error, so the end of its `with` block, which releases
// the id, is quiet after that (the library resets the thread's current id).
thread_local int64_t told_reaped = DAC_INVALID_ID;

[[noreturn]] void fail_dac() {
  // The native message where torch raises one (distautograd's are the same
  // text), else distautograd's: as a c10::Error, which Python sees as the
  // RuntimeError torch raises. A context the reaper took says so, and
  // which setting made it (the library names only its own function).
  const char* msg = dac_last_error();
  long long ms = reap_idle_ms.load(std::memory_order_relaxed);
  if (ms > 0 && strstr(msg, "reaped by dac_reap_idle_contexts") != nullptr) {
    int64_t cur = DAC_INVALID_ID;
    if (dac_current_context_id(&cur) == DAC_OK)
      told_reaped = cur;
    TORCH_CHECK(false, msg, "; the torch backend's reaper releases every context idle that long "
                "(DISTAUTOGRAD_REAP_IDLE_MS=", ms, "): set it above the longest pause of a pass, or unset it");
  }
  if (strstr(msg, "released by dac_release_contexts_of_worker") != nullptr)
    TORCH_CHECK(false, msg, "; the torch backend found that worker gone, and released what its passes left here "
                "(DISTAUTOGRAD_DEAD_WORKERS)");
  TORCH_CHECK(false, msg);
  std::abort();
}

// torch's own log lines, written as the served torch's container.cpp
// writes them, its file and line included: stderr, and whatever filters it
// (GLOG_minloglevel with 1.13's glog, TORCH_CPP_LOG_LEVEL with 2.6's c10
// logging), sees what it sees natively. torch 1.13 logs through glog;
// Debian's torch 2.6 is built without it (c10 writes the line itself).
constexpr const char* kTorchContainerFile = "./torch/csrc/distributed/autograd/context/container.cpp";
#if TORCH_VERSION_MAJOR < 2
constexpr int kLineAlreadyInitialized = 52;  // LOG(INFO) in init()
constexpr int kLineCouldNotRelease = 256;    // LOG(ERROR) in sendReleaseContextRpc's callback
#else
// Debian 13's libtorch_cpu.so.2.6's (its c10::MessageLogger calls).
constexpr int kLineAlreadyInitialized = 50;
constexpr int kLineCouldNotRelease = 254;
#endif
#ifdef C10_USE_GLOG
using TorchLog = google::LogMessage;
constexpr auto kTorchInfo = google::GLOG_INFO;
constexpr auto kTorchError = google::GLOG_ERROR;
#else
using TorchLog = c10::MessageLogger;
constexpr auto kTorchInfo = c10::GLOG_INFO;
constexpr auto kTorchError = c10::GLOG_ERROR;
#endif

inline void check(int rc) {
  if (__builtin_expect(rc != DAC_OK, 0))
    fail_dac();
}

constexpr size_t kVtableHeader = 2;  // offset-to-top and typeinfo, before the slots
constexpr size_t kDisposeSlot = 2;   // after the destructor's two entries
constexpr size_t kBlockHeader = 16;  // _Sp_counted_base: the vptr and the two counts

// libtorch's disposer of a DistAutogradContext: takes its control block,
// the object 16 bytes on.
void* torch_disposer() { return torch_context_block_vtable[kVtableHeader + kDisposeSlot]; }

// Room for one DistAutogradContext: probe() checks that libtorch's own
// allocation for one (its control block, kBlockHeader more) fits.
constexpr size_t kContextRoom = 368;

// One libtorch context and the reference its distautograd context holds.
// Its own control block (make_shared<Box>) counts every ContextPtr torch
// holds, which aliases the object inside; self is the host's reference.
struct Box {
  ContextPtr self;
  alignas(16) unsigned char room[kContextRoom];

  explicit Box(int64_t id) { new (room) ta::DistAutogradContext(id); }
  ~Box() {
    using Dispose = void (*)(uintptr_t);
    reinterpret_cast<Dispose>(torch_disposer())(reinterpret_cast<uintptr_t>(room) - kBlockHeader);
    counts.destroyed.fetch_add(1, std::memory_order_relaxed);
  }
  ta::DistAutogradContext* object() { return reinterpret_cast<ta::DistAutogradContext*>(room); }
};

// A Box as a host value, and back.
uint64_t host_value_of(Box* b) { return reinterpret_cast<uintptr_t>(b); }
Box* box_of(uint64_t value) { return reinterpret_cast<Box*>(static_cast<uintptr_t>(value)); }

void drop_host(uint64_t value) { box_of(value)->self.reset(); }

// A new libtorch context of id, in a box that holds its own reference.
Box* make_torch_context(int64_t id) {
  auto b = std::make_shared<Box>(id);
  Box* box = b.get();
  box->self = ContextPtr(std::move(b), box->object());
  counts.made.fetch_add(1, std::memory_order_relaxed);
  return box;
}

// Drops a handle however the scope ends.
struct Handle {
  dac_context* h = nullptr;
  ~Handle() {
    if (h != nullptr)
      dac_context_unref(h);
  }
};

// Makes a libtorch context for the distautograd context of id (through a
// live handle) and hangs it on as the host value, unless another thread's
// got there first: either way, the one the context keeps.
ContextPtr attach(dac_context* h, int64_t id) {
  Box* cand = make_torch_context(id);
  uint64_t cur = 0;
  int rc = dac_context_set_host_value(h, host_value_of(cand), drop_host, &cur);
  if (rc != DAC_OK || cur != host_value_of(cand))
    cand->self.reset();
  check(rc);
  return box_of(cur)->self;
}

// The libtorch context of a distautograd context (through a live handle):
// the host value, made and agreed on if it has none yet.
ContextPtr hosted(dac_context* h) {
  uint64_t v = 0;
  check(dac_context_host_value(h, &v));
  if (__builtin_expect(v != 0, 1))
    return box_of(v)->self;
  int64_t id = 0;
  check(dac_context_id(h, &id));
  return attach(h, id);
}

// The workers torch's engine recorded on the libtorch context of a
// distautograd context (through a live handle): what its release tells
// (torch's int16_t worker id: 40000 is -25536). Empty without one.
std::vector<int32_t> torch_known_workers(dac_context* h) {
  std::vector<int32_t> ids;
  uint64_t v = 0;
  if (dac_context_host_value(h, &v) != DAC_OK || v == 0)
    return ids;
  auto known = box_of(v)->object()->getKnownWorkerIds();
  ids.reserve(known.size());
  for (auto w : known)
    ids.push_back(static_cast<int32_t>(static_cast<uint16_t>(w)));
  return ids;
}

// ---- Workers found gone ----------------------------------------------------
//
// A worker is gone when a send to it fails because its connection was reset
// or ended, or a new one refused: its process died (TensorPipe then keeps
// the pipe in error: every later send to it fails the same way). What it
// held died with it. The backend then stops telling it anything (a cleanup
// message to it is dropped and counted, not retried by torch for hours,
// each retry failing) and releases what its passes left here (below: the
// contexts whose origin is gone). A timeout is not gone: a stopped or
// partitioned worker may answer again. DISTAUTOGRAD_DEAD_WORKERS=0 turns it
// all off, as natively.

// Whether a send's error says the peer is gone: its connection was reset or
// ended, or a new one refused (TensorPipe's errors, by transport: shm says
// eof, uv names the errno). A timeout or anything else does not.
bool gone(const std::string& error) {
  static const char* const kGone[] = {"eof (", "EOF: end of file", "ECONNRESET", "ECONNREFUSED", "EPIPE",
                                      "connection reset by peer", "connection refused", "Connection reset by peer",
                                      "Connection refused", "broken pipe", "Broken pipe"};
  if (error.rfind("eof", 0) == 0)
    return true;
  for (const char* g : kGone)
    if (error.find(g) != std::string::npos)
      return true;
  return false;
}

// The workers found gone, a bit each (worker ids are 16 bits).
std::atomic<uint64_t> gone_bits[(1 << 16) / 64];
std::atomic<bool> dead_workers_on{false};  // DISTAUTOGRAD_DEAD_WORKERS (settings)

bool known_gone(int worker) {
  return (gone_bits[worker >> 6].load(std::memory_order_relaxed) >> (worker & 63)) & 1;
}

// The checker's wake-up: a pipe, written by a probe's answer (an origin
// found gone) and by the contexts signal's handler (async-signal-safe).
int wake_fds[2] = {-1, -1};
volatile sig_atomic_t contexts_requested = 0;

void wake_checker() {
  if (wake_fds[1] >= 0) {
    int saved = errno;
    (void)!write(wake_fds[1], "x", 1);
    errno = saved;
  }
}

struct OriginState {
  bool in_flight = false;
  bool dead = false;               // found gone: its contexts to release
  std::string why;                 // the send's error that said so
  std::chrono::steady_clock::time_point next;  // no probe before
};
std::mutex origins_mu;
std::unordered_map<int, OriginState> origins;

// Records that worker is gone (why: the send's error): its cleanup
// messages are dropped from now on, and the checker releases the contexts
// of its passes. The first time, one line on stderr.
void mark_gone(int worker, const std::string& why) {
  const uint64_t bit = 1ull << (worker & 63);
  if (gone_bits[worker >> 6].fetch_or(bit) & bit)
    return;
  counts.workers_gone.fetch_add(1, std::memory_order_relaxed);
  dat_say("distautograd-torch: worker %d is gone (%s): no more cleanup messages to it, and the contexts of "
                  "its passes here are released\n", worker, why.c_str());
  {
    std::lock_guard<std::mutex> g(origins_mu);
    auto& st = origins[worker];
    st.dead = true;
    st.why = why;
  }
  wake_checker();
}

// ---- The cleanup sender: torch's own CleanupAutogradContextReq ----------

// The cleanup messages handed to torch's agent and not yet answered or
// finally failed: what flush (dat_impl_flush) waits for. A send counts
// itself before it hands the message over, and its callback (which may run
// before sendWithRetries returns) takes it out; a flush waiting registers
// first, so that the last answer's notify never falls between its check
// and its wait.
std::atomic<int64_t> outstanding{0};
std::atomic<int> flush_waiters{0};
std::mutex flush_mu;
std::condition_variable flush_cv;

void answered() {
  if (outstanding.fetch_sub(1) == 1 && flush_waiters.load() > 0) {
    std::lock_guard<std::mutex> g(flush_mu);
    flush_cv.notify_all();
  }
}

// What finally became of a cleanup message handed to torch's agent.
void cleanup_answered(int32_t worker, rpc::JitFuture& f) {
  if (!f.hasError()) {
    counts.cleanup_delivered.fetch_add(1, std::memory_order_relaxed);
  } else {
    counts.cleanup_torch_failed.fetch_add(1, std::memory_order_relaxed);
    TorchLog(kTorchContainerFile, kLineCouldNotRelease, kTorchError).stream()
        << "Could not release Dist Autograd Context on node " << worker << ": " << f.tryRetrieveErrorMessage();
  }
  answered();
}

// Torch's own retries of a cleanup message (20, as the native
// sendReleaseContextRpc), from an agent's callback.
void send_with_retries(int32_t worker, int64_t context_id) {
  try {
    auto agent = rpc::RpcAgent::getCurrentRpcAgent();
    rpc::RpcRetryOptions options;
    options.maxRetries = 20;
    auto fut = agent->sendWithRetries(agent->getWorkerInfo(static_cast<rpc::worker_id_t>(worker)),
                                      ta::CleanupAutogradContextReq(context_id).toMessage(), options);
    fut->addCallback([worker](rpc::JitFuture& f) { cleanup_answered(worker, f); });
  } catch (const std::exception& e) {
    counts.cleanup_torch_failed.fetch_add(1, std::memory_order_relaxed);
    TorchLog(kTorchContainerFile, kLineCouldNotRelease, kTorchError).stream()
        << "Could not release Dist Autograd Context on node " << worker << ": " << e.what();
    answered();
  }
}

// Hands the message to the current RPC agent and returns: it never waits
// for the network, so it is declared non-blocking and runs on the
// releasing thread, as the native sendReleaseContextRpc does (waking a
// library thread per release cost more than the send). Natively the agent
// sends it with 20 retries; here the first attempt goes alone, so that a
// worker found gone by it is told nothing more (above), and only another
// failure goes on to torch's retries. What finally fails is counted and
// logged as natively.
int send_cleanup(void*, int32_t worker, int64_t context_id) {
  if (exiting.load(std::memory_order_relaxed) || !rpc::RpcAgent::isCurrentRpcAgentSet())
    return 1;  // retried with backoff; given up on and counted if it stays so
  const bool dead_workers = dead_workers_on.load(std::memory_order_relaxed);
  if (dead_workers && known_gone(worker)) {  // dropped: handed and gone at once, for the counts
    counts.cleanup_handed.fetch_add(1, std::memory_order_relaxed);
    counts.cleanup_gone.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  outstanding.fetch_add(1);
  c10::intrusive_ptr<rpc::JitFuture> fut;
  try {
    auto agent = rpc::RpcAgent::getCurrentRpcAgent();
    const auto& to = agent->getWorkerInfo(static_cast<rpc::worker_id_t>(worker));
    if (dead_workers) {
      fut = agent->send(to, ta::CleanupAutogradContextReq(context_id).toMessage());
    } else {
      rpc::RpcRetryOptions options;
      options.maxRetries = 20;
      fut = agent->sendWithRetries(to, ta::CleanupAutogradContextReq(context_id).toMessage(), options);
    }
  } catch (const std::exception&) {
    answered();  // not handed over: the library retries it
    return 1;
  }
  counts.cleanup_handed.fetch_add(1, std::memory_order_relaxed);
  if (!dead_workers) {
    fut->addCallback([worker](rpc::JitFuture& f) { cleanup_answered(worker, f); });
    return 0;
  }
  fut->addCallback([worker, context_id](rpc::JitFuture& f) {
    if (!f.hasError()) {
      cleanup_answered(worker, f);
      return;
    }
    std::string why = f.tryRetrieveErrorMessage();
    if (gone(why)) {
      mark_gone(worker, why);
      counts.cleanup_gone.fetch_add(1, std::memory_order_relaxed);
      answered();
      return;
    }
    send_with_retries(worker, context_id);  // still outstanding
  });
  return 0;
}

// ---- Settings ------------------------------------------------------------

// The backend's settings, read once from the environment when it starts.
// The launcher (distautograd._launch: SETTINGS) refuses a bad value before
// the job starts; a process started some other way gets one line on
// stderr here and the setting's default.
struct Settings {
  long long reap_idle_ms = 0;     // DISTAUTOGRAD_REAP_IDLE_MS: 0, no reaper
  long long max_contexts = -1;    // DISTAUTOGRAD_MAX_CONTEXTS: -1, no cap
  bool dead_workers = true;       // DISTAUTOGRAD_DEAD_WORKERS
  int contexts_signal = SIGUSR2;  // DISTAUTOGRAD_CONTEXTS_SIGNAL: 0, none
};

// An integer in [lo, hi] from the whole of text.
bool parse_int(const char* text, long long lo, long long hi, long long* out) {
  if (text == nullptr || !(isdigit(static_cast<unsigned char>(*text)) || *text == '-' || *text == '+'))
    return false;
  char* end = nullptr;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno != 0 || *end != 0 || v < lo || v > hi)
    return false;
  *out = v;
  return true;
}

// A signal by name (USR2, SIGUSR2) or number, or 0 / off / none: none.
bool parse_signal(const char* text, int* out) {
  if (strcmp(text, "0") == 0 || strcmp(text, "off") == 0 || strcmp(text, "none") == 0) {
    *out = 0;
    return true;
  }
  const char* name = strncmp(text, "SIG", 3) == 0 ? text + 3 : text;
  static const struct { const char* name; int sig; } kSignals[] = {
      {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP}, {"WINCH", SIGWINCH}, {"PWR", SIGPWR}};
  for (const auto& k : kSignals)
    if (strcmp(name, k.name) == 0) {
      *out = k.sig;
      return true;
    }
  long long n = 0;
  if (parse_int(text, 1, SIGRTMAX, &n) && n != SIGKILL && n != SIGSTOP && n != SIGSEGV && n != SIGBUS &&
      n != SIGFPE && n != SIGILL && n != SIGPROF && n != SIGURG && n != SIGPIPE && n != SIGCHLD) {
    *out = static_cast<int>(n);
    return true;
  }
  return false;
}

Settings read_settings() {
  Settings s;
  auto bad = [](const char* name, const char* value, const char* what, const char* instead) {
    dat_say("distautograd-torch: %s=%s is not %s; %s\n", name, value, what, instead);
  };
  if (const char* v = getenv("DISTAUTOGRAD_REAP_IDLE_MS"); v != nullptr && *v != 0 &&
      !parse_int(v, 1, std::numeric_limits<int64_t>::max() / 1000000, &s.reap_idle_ms))
    bad("DISTAUTOGRAD_REAP_IDLE_MS", v, "a positive number of ms", "no reaper");
  if (const char* v = getenv("DISTAUTOGRAD_MAX_CONTEXTS"); v != nullptr && *v != 0 &&
      !parse_int(v, 0, std::numeric_limits<int64_t>::max(), &s.max_contexts))
    bad("DISTAUTOGRAD_MAX_CONTEXTS", v, "a count >= 0", "no cap");
  if (const char* v = getenv("DISTAUTOGRAD_DEAD_WORKERS"); v != nullptr && *v != 0) {
    if (strcmp(v, "0") == 0)
      s.dead_workers = false;
    else if (strcmp(v, "1") != 0)
      bad("DISTAUTOGRAD_DEAD_WORKERS", v, "0 or 1", "on (1)");
  }
  if (const char* v = getenv("DISTAUTOGRAD_CONTEXTS_SIGNAL"); v != nullptr && *v != 0 &&
      !parse_signal(v, &s.contexts_signal))
    bad("DISTAUTOGRAD_CONTEXTS_SIGNAL", v, "a signal the backend may take (USR1, USR2, HUP, WINCH, PWR, a number, or off)",
        "SIGUSR2");
  return s;
}

Settings settings;

// ---- What this worker holds ------------------------------------------------

// One context as contexts() and the signal's report show it.
struct ContextView {
  int64_t id;
  int origin;
  std::vector<int32_t> known;  // sorted
  int64_t age_ms, idle_ms;
};

// Every context stored now, a handle each (a reference the caller drops),
// taken without touching any: a listing is no use.
struct Listed {
  std::vector<dac_context*> h;
  size_t n = 0;
  Listed() {
    h.resize(64);
    while (dac_context_list(h.data(), h.size(), &n) == DAC_OK && n > h.size()) {
      dac_context_unref_many(h.data(), h.size());
      h.resize(n + n / 2);
    }
    n = std::min(n, h.size());
  }
  ~Listed() { dac_context_unref_many(h.data(), n); }
  Listed(const Listed&) = delete;
  Listed& operator=(const Listed&) = delete;
};

// The contexts stored now; with their known workers (the library's, and
// those torch's engine recorded on libtorch's context, which its release
// tells) and ages if full, else their ids and idle times alone (read in
// C: what the origin check asks often).
std::vector<ContextView> list_contexts(bool full) {
  Listed listed;
  std::vector<ContextView> out;
  out.reserve(listed.n);
  for (size_t i = 0; i < listed.n; i++) {
    dac_context* h = listed.h[i];
    ContextView v{};
    int64_t age = 0, idle = 0;
    if (dac_context_id(h, &v.id) != DAC_OK || dac_context_times(h, full ? &age : nullptr, &idle) != DAC_OK)
      continue;
    v.origin = static_cast<int>(static_cast<uint64_t>(v.id) >> 48);
    v.age_ms = age;
    v.idle_ms = idle;
    if (full) {
      v.known = torch_known_workers(h);
      size_t k = 0;
      if (dac_context_known_worker_ids(h, nullptr, 0, &k) == DAC_OK && k > 0) {
        std::vector<int32_t> lib(k);
        if (dac_context_known_worker_ids(h, lib.data(), lib.size(), &k) == DAC_OK)
          v.known.insert(v.known.end(), lib.begin(), lib.begin() + std::min(k, lib.size()));
      }
      std::sort(v.known.begin(), v.known.end());
      v.known.erase(std::unique(v.known.begin(), v.known.end()), v.known.end());
    }
    out.push_back(std::move(v));
  }
  return out;
}

// Gives the library the workers torch's engine recorded on each context
// for which which(origin, idle_ms) holds, before the library releases them
// itself (the reaper, a dead origin's contexts): its fan-out then tells
// them, as torch's release would. Only those releases need it: torch's own
// pass them to the library as they release (release_with_torch_workers),
// so a pass's RPCs never call into Go for its workers. A worker the
// library knows already is settled in C.
template <typename Which>
void give_torch_workers(Which which) {
  Listed listed;
  for (size_t i = 0; i < listed.n; i++) {
    dac_context* h = listed.h[i];
    int64_t id = 0, idle = 0;
    if (dac_context_id(h, &id) != DAC_OK || dac_context_times(h, nullptr, &idle) != DAC_OK ||
        !which(static_cast<int>(static_cast<uint64_t>(id) >> 48), idle))
      continue;
    for (int32_t w : torch_known_workers(h))
      dac_context_add_known_worker_id(h, w);
  }
}

// DISTAUTOGRAD_REAP_IDLE_MS=N: a thread releases every context idle for N
// ms (what a worker that died mid-pass left here: no cleanup RPC will come
// for it), fanning out as a release does. Off by default: a pass that
// legitimately holds a context idle longer than N would lose it. (The
// origin check below finds what a dead worker left without that risk.)
void start_reaper() {
  long long ms = settings.reap_idle_ms;
  if (ms <= 0)
    return;
  reap_idle_ms.store(ms, std::memory_order_relaxed);
  std::thread([ms] {
    const auto period = std::chrono::milliseconds(std::max<long long>(20, ms / 4));
    while (!exiting.load(std::memory_order_relaxed)) {
      std::this_thread::sleep_for(period);
      // Twice the coarse clock's resolution early: a context turning idle
      // between the two calls has its workers given too.
      give_torch_workers([ms](int, int64_t idle) { return idle >= ms - 20; });
      dac_reap_idle_contexts(ms, nullptr);
    }
  }).detach();
}

// Writes what this worker holds to stderr, a line a context: what the
// contexts signal prints.
void print_contexts() {
  auto all = list_contexts(true);
  int32_t self = -1;
  dac_worker_id(&self);
  std::string text = "distautograd-torch: worker " + std::to_string(self) + " (pid " + std::to_string(getpid()) +
                     ") holds " + std::to_string(all.size()) + (all.size() == 1 ? " context" : " contexts") +
                     (all.empty() ? "\n" : ":\n");
  for (const auto& v : all) {
    char line[256];
    std::string known;
    for (size_t i = 0; i < v.known.size(); i++)
      known += (i ? ", " : "") + std::to_string(v.known[i]);
    snprintf(line, sizeof line, "  context %lld: origin worker %d, known workers [%s], age %.1f s, idle %.1f s\n",
             static_cast<long long>(v.id), v.origin, known.c_str(), v.age_ms / 1000.0, v.idle_ms / 1000.0);
    text += line;
  }
  (void)!write(STDERR_FILENO, text.data(), text.size());
}

// ---- Contexts whose origin is gone --------------------------------------
//
// A pass's context lives on every worker it reached; the worker that
// opened it (its origin, the id's top 16 bits) tells the others to release
// theirs when its pass ends. An origin killed mid-pass never does, so
// natively its contexts stay on the others for good. Here a context idle
// for the agent's RPC timeout, on a worker other than its origin, has its
// origin checked: through torch's own agent, a cleanup request for the
// origin's max id, which no worker ever holds (ids stop below it), so that
// torch's handler there releases nothing. An answer means the origin lives:
// its contexts stay, however long they are idle, and it is asked again
// after another timeout. A send that fails because the peer is gone (its
// connection reset, ended or refused: gone()) means it is dead: every
// context of that origin here is released, fanning out to the workers the
// pass reached but the dead one. A timeout, or any other error, is no
// answer either way: a stopped or partitioned worker is not dead, and its
// contexts stay until it answers or is gone (docs/torch.md).

// What a probe costs the origin: torch's handler looks the id up and
// answers.
int64_t never_held(int origin) { return static_cast<int64_t>((static_cast<uint64_t>(origin) << 48) | ((1ull << 48) - 1)); }

void on_contexts_signal(int) {
  contexts_requested = 1;
  wake_checker();
}

// The agent's RPC timeout, or torch's default where it has none (0).
std::chrono::milliseconds rpc_timeout(const std::shared_ptr<rpc::RpcAgent>& agent) {
  auto t = agent->getRpcTimeout();
  if (t.count() <= 0)
    return std::chrono::milliseconds(static_cast<int64_t>(rpc::kDefaultRpcTimeoutSeconds * 1000));
  return t;
}

void probe_origin(const std::shared_ptr<rpc::RpcAgent>& agent, int origin, std::chrono::milliseconds timeout) {
  c10::intrusive_ptr<rpc::JitFuture> fut;
  try {
    const auto& to = agent->getWorkerInfo(static_cast<rpc::worker_id_t>(origin));
    fut = agent->send(to, ta::CleanupAutogradContextReq(never_held(origin)).toMessage(),
                      static_cast<float>(timeout.count()) / 1000);
  } catch (const std::exception&) {
    // Not a worker the agent knows, or the agent is shutting down: no
    // answer either way; asked again later.
    std::lock_guard<std::mutex> g(origins_mu);
    origins[origin].in_flight = false;
    return;
  }
  counts.origin_probes.fetch_add(1, std::memory_order_relaxed);
  // The callback may run here, at once: the lock is not held.
  fut->addCallback([origin, timeout](rpc::JitFuture& f) {
    std::string why = f.hasError() ? f.tryRetrieveErrorMessage() : std::string();
    {
      std::lock_guard<std::mutex> g(origins_mu);
      auto& st = origins[origin];
      st.in_flight = false;
      st.next = std::chrono::steady_clock::now() + timeout;
    }
    if (f.hasError() && gone(why))
      mark_gone(origin, why);
  });
}

// Releases what the origins found gone left here (on the checker's thread,
// not on the agent's that answered).
void release_dead_origins() {
  std::vector<std::pair<int, std::string>> dead;
  {
    std::lock_guard<std::mutex> g(origins_mu);
    for (auto& [origin, st] : origins)
      if (st.dead) {
        dead.emplace_back(origin, st.why);
        st.dead = false;
      }
  }
  for (auto& [origin, why] : dead) {
    int64_t n = 0;
    give_torch_workers([o = origin](int of, int64_t) { return of == o; });
    if (dac_release_contexts_of_worker(origin, &n) != DAC_OK || n == 0)
      continue;
    counts.orphans_released.fetch_add(n, std::memory_order_relaxed);
    dat_say("distautograd-torch: released the %lld %s of worker %d's passes held here (it is gone: %s)\n",
            static_cast<long long>(n), n == 1 ? "context" : "contexts", origin, why.c_str());
  }
}

// One look: the origins of contexts idle for the timeout, each asked at
// most once a timeout, one probe in flight each.
void check_origins(int self, std::chrono::milliseconds* period) {
  if (!rpc::RpcAgent::isCurrentRpcAgentSet())
    return;
  std::shared_ptr<rpc::RpcAgent> agent;
  try {
    agent = rpc::RpcAgent::getCurrentRpcAgent();
  } catch (const std::exception&) {
    return;
  }
  const auto timeout = rpc_timeout(agent);
  *period = std::clamp(timeout / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  int64_t n = 0;
  if (dac_num_contexts(&n) != DAC_OK || n == 0)
    return;
  std::unordered_set<int> idle;
  for (const auto& v : list_contexts(false))
    if (v.origin != self && v.idle_ms >= timeout.count())
      idle.insert(v.origin);
  const auto now = std::chrono::steady_clock::now();
  std::vector<int> ask;
  {
    std::lock_guard<std::mutex> g(origins_mu);
    for (int origin : idle) {
      auto& st = origins[origin];
      if (known_gone(origin)) {
        st.dead = true;  // a late message stored a context of its again
        continue;
      }
      if (!st.in_flight && !st.dead && now >= st.next) {
        st.in_flight = true;
        ask.push_back(origin);
      }
    }
  }
  for (int origin : ask)
    probe_origin(agent, origin, timeout);
  release_dead_origins();
}

// The checker's thread: the origin check every quarter of the RPC timeout
// (at most a second apart), and the contexts signal's report, each as soon
// as it is due.
void start_checker(int64_t worker) {
  const bool signal_wanted = settings.contexts_signal != 0;
  if (!settings.dead_workers && !signal_wanted)
    return;
  if (pipe2(wake_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    dat_say("distautograd-torch: no pipe for the origin check (%s): it does not run\n", strerror(errno));
    return;
  }
  if (signal_wanted) {
    struct sigaction old{}, sa{};
    // Only a signal nobody took: a handler of the host's, or one it
    // ignores, stays as it is.
    if (sigaction(settings.contexts_signal, nullptr, &old) == 0 && old.sa_handler == SIG_DFL &&
        !(old.sa_flags & SA_SIGINFO)) {
      sa.sa_handler = on_contexts_signal;
      sa.sa_flags = SA_RESTART | SA_ONSTACK;
      sigemptyset(&sa.sa_mask);
      if (sigaction(settings.contexts_signal, &sa, nullptr) == 0)
        // A forked child has no checker to print (and cannot use the
        // library): the signal does there what it did before.
        pthread_atfork(nullptr, nullptr, [] { signal(settings.contexts_signal, SIG_DFL); });
    }
  }
  const int self = static_cast<int>(worker);
  const bool check = settings.dead_workers;
  std::thread([self, check] {
    auto period = std::chrono::milliseconds(1000);
    auto next = std::chrono::steady_clock::now();
    while (!exiting.load(std::memory_order_relaxed)) {
      auto now = std::chrono::steady_clock::now();
      int wait = check ? static_cast<int>(std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count())) : -1;
      struct pollfd p = {wake_fds[0], POLLIN, 0};
      if (poll(&p, 1, wait) > 0) {
        char buf[64];
        while (read(wake_fds[0], buf, sizeof buf) > 0) {
        }
      }
      if (exiting.load(std::memory_order_relaxed))
        return;
      if (contexts_requested) {
        contexts_requested = 0;
        print_contexts();
      }
      if (!check)
        continue;
      release_dead_origins();
      if (std::chrono::steady_clock::now() >= next) {
        check_origins(self, &period);
        next = std::chrono::steady_clock::now() + period;
      }
    }
  }).detach();
}

void ensure_torch_container(int64_t worker) {
  if (instance.load(std::memory_order_acquire) != nullptr)
    return;
  std::lock_guard<std::mutex> g(init_mu);
  if (instance.load(std::memory_order_relaxed) != nullptr)
    return;
  void* p = real.init(worker);
  check(dac_set_cleanup_sender(send_cleanup, nullptr));
  check(dac_set_cleanup_sender_nonblocking(1));
  // DISTAUTOGRAD_MAX_CONTEXTS=N caps live contexts: past it torch gets a
  // RuntimeError instead of growing without bound.
  if (settings.max_contexts >= 0 && dac_set_max_contexts(settings.max_contexts) != DAC_OK)
    dat_say("distautograd-torch: DISTAUTOGRAD_MAX_CONTEXTS=%lld: %s; no cap\n", settings.max_contexts,
            dac_last_error());
  start_reaper();
  dead_workers_on.store(settings.dead_workers, std::memory_order_relaxed);
  start_checker(worker);
  instance.store(p, std::memory_order_release);
}

// ---- The members ----------------------------------------------------------

void* m_init(int64_t worker_id) {
  int32_t w = 0;
  const bool again = dac_worker_id(&w) == DAC_OK;  // two first inits racing: neither logs
  check(dac_init(worker_id));
  if (again)
    TorchLog(kTorchContainerFile, kLineAlreadyInitialized, kTorchInfo).stream()
        << "DistAutogradContainer is already initialized";
  ensure_torch_container(worker_id);
  return instance.load(std::memory_order_acquire);
}

void* m_getInstance() {
  void* p = instance.load(std::memory_order_acquire);
  if (__builtin_expect(p != nullptr, 1))
    return p;
  // Initialized through distautograd's own API (the Python package, say)?
  int32_t w = 0;
  check(dac_worker_id(&w));
  ensure_torch_container(w);
  return instance.load(std::memory_order_acquire);
}

ContextPtr m_newContext(void*) {
  Handle h;
  int64_t id = 0;
  check(dac_context_new_id(&h.h, &id));
  try {
    return attach(h.h, id);  // none hosted yet, unless a racing get-or-create was first
  } catch (...) {
    dac_context_release_if_present(id, nullptr);  // all or nothing
    throw;
  }
}

// Releases the context stored under id, if any, with the known workers
// torch's engine recorded on libtorch's context, which distautograd's
// release fan-out tells: one call into the library's Go side when it is
// there, none when it is not (the usual case for a cleanup message: every
// worker of a pass tells every other). False: nothing was released.
bool release_with_torch_workers(int64_t id) {
  Handle h;
  check(dac_context_retrieve_if_present(id, &h.h));
  if (h.h == nullptr)
    return false;
  std::vector<int32_t> ids = torch_known_workers(h.h);
  // Dropped before the release, so that the release's is the context's
  // last reference and its death happens there, not in a second call.
  dac_context_unref(h.h);
  h.h = nullptr;
  int released = 0;
  check(dac_context_release_with_workers(id, ids.data(), ids.size(), &released));
  return released != 0;
}

void m_releaseContext(void*, int64_t id) {
  if (release_with_torch_workers(id))
    return;
  // Gone: torch's "Could not find autograd context with id", unless it is
  // the reaped pass this thread has been told about already.
  int rc = dac_context_release(id);
  if (rc != DAC_OK && told_reaped != DAC_INVALID_ID && id == told_reaped) {
    told_reaped = DAC_INVALID_ID;
    return;
  }
  check(rc);
}

void m_releaseContextIfPresent(void*, int64_t id) { release_with_torch_workers(id); }

void m_isValidContext(void*, int64_t id) { check(dac_context_is_valid(id)); }

ContextPtr m_retrieveContext(void*, int64_t id) {
  Handle h;
  check(dac_context_retrieve(id, &h.h));
  return hosted(h.h);
}

ContextPtr m_currentContext(void*) {
  Handle h;
  check(dac_context_current(&h.h));
  return hosted(h.h);
}

bool m_hasValidContext(const void*) {
  int out = 0;
  return dac_has_valid_context(&out) == DAC_OK && out != 0;
}

int64_t m_newAutogradMessageId(void*) {
  int64_t id = 0;
  check(dac_new_autograd_message_id(&id));
  return id;
}

ContextPtr m_getOrCreateContext(void*, int64_t id) {
  Handle h;
  check(dac_context_get_or_create(id, &h.h));
  return hosted(h.h);
}

int64_t m_getMaxId(void*) {
  int64_t id = 0;
  check(dac_max_id(&id));
  return id;
}

int16_t m_getWorkerId(const void*) {
  int32_t w = 0;
  check(dac_worker_id(&w));
  return static_cast<int16_t>(w);
}

// The current id is distautograd's thread-local, not libtorch's: every
// member that reads or writes it is served here.
void m_setCurrentContextId(int64_t id) { check(dac_set_current_context_id(id)); }
void m_forceCurrentContextId(int64_t id) { check(dac_force_current_context_id(id)); }
void m_clearCurrentContext(void*) { check(dac_clear_current_context()); }

size_t m_numAutogradContexts(const void*) {
  int64_t n = 0;
  check(dac_num_contexts(&n));
  return static_cast<size_t>(n);
}

int64_t m_currentContextId() {
  int64_t id = -1;
  return dac_current_context_id(&id) == DAC_OK ? id : -1;
}

#if DAT_TORCH_HEADERS
// Where the torch's own headers are there, the compiler checks what the
// backend assumes of them: each member it serves has the ABI of the
// function serving it (the object first, as a pointer; a returned reference
// to the container as a pointer; newContext's const on the shared_ptr it
// returns by value changes no ABI), and a context fits the room a Box has.
template <typename F>
struct Abi;
template <typename T>
using Ret = std::conditional_t<std::is_same_v<T, ta::DistAutogradContainer&>, void*, std::remove_const_t<T>>;
template <typename R, typename... A>
struct Abi<R (*)(A...)> {
  using type = Ret<R> (*)(A...);
};
template <typename R, typename... A>
struct Abi<R (ta::DistAutogradContainer::*)(A...)> {
  using type = Ret<R> (*)(void*, A...);
};
template <typename R, typename... A>
struct Abi<R (ta::DistAutogradContainer::*)(A...) const> {
  using type = Ret<R> (*)(const void*, A...);
};
#define DAT_SAME_ABI(member)                                                                              \
  static_assert(std::is_same_v<Abi<decltype(&ta::DistAutogradContainer::member)>::type, decltype(&m_##member)>, \
                "m_" #member " does not have the ABI of DistAutogradContainer::" #member " in this torch's headers")
DAT_SAME_ABI(init);
DAT_SAME_ABI(getInstance);
DAT_SAME_ABI(newContext);
DAT_SAME_ABI(releaseContext);
DAT_SAME_ABI(releaseContextIfPresent);
DAT_SAME_ABI(isValidContext);
DAT_SAME_ABI(retrieveContext);
DAT_SAME_ABI(currentContext);
DAT_SAME_ABI(hasValidContext);
DAT_SAME_ABI(newAutogradMessageId);
DAT_SAME_ABI(getOrCreateContext);
DAT_SAME_ABI(getMaxId);
DAT_SAME_ABI(getWorkerId);
DAT_SAME_ABI(setCurrentContextId);
DAT_SAME_ABI(forceCurrentContextId);
DAT_SAME_ABI(clearCurrentContext);
DAT_SAME_ABI(numAutogradContexts);
DAT_SAME_ABI(currentContextId);
static_assert(std::is_same_v<ta::ContextPtr, ContextPtr>);
static_assert(sizeof(ta::DistAutogradContext) <= kContextRoom && alignof(ta::DistAutogradContext) <= 16,
              "a DistAutogradContext of this torch does not fit the room a Box has for one");
#endif

std::atomic<bool> started{false};

// Whether a context behaves as torch's: it reports the id it was made
// with, and known workers as they are added.
bool behaves(ta::DistAutogradContext* c, int64_t id) {
  if (c == nullptr || c->contextId() != id || !c->getKnownWorkerIds().empty())
    return false;
  c->addKnownWorkerId(7);
  auto ids = c->getKnownWorkerIds();
  return ids.size() == 1 && ids.count(7) == 1;
}

// Checks at run time that libtorch is the build this was made for, before
// anything is served: a context its own factory makes (its get-or-create
// and release on an id never issued) sits in a control block of the type
// whose exported vtable Box destroys through, 16 bytes on, in an allocation
// that Box's room holds; it behaves (above), and the container is left
// empty; and a context built in a Box behaves too, and is destroyed. A
// layout that differs shows here rather than as a crash later.
bool probe(const char* simulate, char* why, size_t cap) {
  try {
    void* self = real.getInstanceInternal();
    const int64_t probe_id = -2;  // never issued: ids are >= 0
    size_t before = real.numAutogradContexts(self);
    ContextPtr p = real.getOrCreateContext(self, probe_id);
    real.releaseContextIfPresent(self, probe_id);
    uintptr_t words[2];  // a shared_ptr: the object, then its control block
    static_assert(sizeof p == sizeof words, "libstdc++'s shared_ptr is two pointers");
    memcpy(words, static_cast<void*>(&p), sizeof words);
    auto* block = reinterpret_cast<void**>(words[1]);
    Dl_info dispose{}, torch{};
    const char* failed = nullptr;  // the first check that fails
    if (block == nullptr || block[0] != &torch_context_block_vtable[kVtableHeader])
      failed = "its contexts' shared_ptr control block is not of the type whose vtable it exports";
    else if (words[0] != words[1] + kBlockHeader)
      failed = "a context does not sit 16 bytes into its control block";
    else if (malloc_usable_size(block) > kBlockHeader + kContextRoom)
      failed = "a context's allocation is larger than the room the backend has for one";
    else if (dladdr(torch_disposer(), &dispose) == 0 ||
             dladdr(reinterpret_cast<void*>(real.getOrCreateContext), &torch) == 0 ||
             dispose.dli_fbase != torch.dli_fbase)
      failed = "the control block's disposer is not libtorch's";
    else if (!behaves(p.get(), probe_id) || real.numAutogradContexts(self) != before)
      failed = "a context its container makes does not behave as expected";
    p.reset();
    if (failed == nullptr) {
      Box* b = make_torch_context(probe_id - 1);
      ContextPtr q = b->self;
      b->self.reset();
      if (!behaves(q.get(), probe_id - 1) || q.use_count() != 1)
        failed = "a context built in place does not behave as expected";
    }
    counts.made.store(0);
    counts.destroyed.store(0);
    if (failed == nullptr && simulate != nullptr && strcmp(simulate, "layout") == 0)
      failed = "simulated";
    if (failed != nullptr)
      snprintf(why, cap, "libtorch's DistAutogradContext does not behave as in the torch " DAT_TORCH_VERSION
                         " build this backend was made for (run-time layout check: %s)", failed);
    return failed == nullptr;
  } catch (const std::exception& e) {
    snprintf(why, cap, "the run-time check of libtorch failed: %s", e.what());
    return false;
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int dat_impl_start(dat_start_args* a) {
  if (a == nullptr || a->abi != DAT_ABI)
    return 1;
  if (a->torch == nullptr || strcmp(a->torch, DAT_TORCH_VERSION) != 0) {
    snprintf(a->why, a->why_cap, "the implementation for torch " DAT_TORCH_VERSION " was given torch %s",
             a->torch ? a->torch : "(none)");
    return 1;
  }
  real.init = reinterpret_cast<decltype(real.init)>(a->real[0]);
  real.getInstanceInternal = reinterpret_cast<decltype(real.getInstanceInternal)>(a->real[18]);
  real.getOrCreateContext = reinterpret_cast<decltype(real.getOrCreateContext)>(a->real[10]);
  real.releaseContextIfPresent = reinterpret_cast<decltype(real.releaseContextIfPresent)>(a->real[4]);
  real.numAutogradContexts = reinterpret_cast<decltype(real.numAutogradContexts)>(a->real[16]);
  settings = read_settings();
  if (!probe(a->simulate, a->why, a->why_cap))
    return 1;
  void** s = a->serve;
  s[0] = reinterpret_cast<void*>(m_init);
  s[1] = reinterpret_cast<void*>(m_getInstance);
  s[2] = reinterpret_cast<void*>(m_newContext);
  s[3] = reinterpret_cast<void*>(m_releaseContext);
  s[4] = reinterpret_cast<void*>(m_releaseContextIfPresent);
  s[5] = reinterpret_cast<void*>(m_isValidContext);
  s[6] = reinterpret_cast<void*>(m_retrieveContext);
  s[7] = reinterpret_cast<void*>(m_currentContext);
  s[8] = reinterpret_cast<void*>(m_hasValidContext);
  s[9] = reinterpret_cast<void*>(m_newAutogradMessageId);
  s[10] = reinterpret_cast<void*>(m_getOrCreateContext);
  s[11] = reinterpret_cast<void*>(m_getMaxId);
  s[12] = reinterpret_cast<void*>(m_getWorkerId);
  s[13] = reinterpret_cast<void*>(m_setCurrentContextId);
  s[14] = reinterpret_cast<void*>(m_forceCurrentContextId);
  s[15] = reinterpret_cast<void*>(m_clearCurrentContext);
  s[16] = reinterpret_cast<void*>(m_numAutogradContexts);
  s[17] = reinterpret_cast<void*>(m_currentContextId);
  started.store(true);
  std::atexit([] { exiting.store(true); });
  return 0;
}

// What the calls that write JSON for distautograd.torch return before
// writing: 2 for bad arguments, 1 where the backend does not serve torch's
// container in this process, 0 to go on.
static int json_call_refused(const char* buf, size_t capacity, const size_t* length) {
  if (length == nullptr || (buf == nullptr && capacity != 0))
    return 2;
  return started.load() ? 0 : 1;
}

// Whether the backend serves torch's container in this process (for
// distautograd.torch.active()).
extern "C" __attribute__((visibility("default"))) int dat_impl_active() { return started.load() ? 1 : 0; }

// The backend's own figures (for distautograd.torch.debug_info(), beside
// libdistautograd's dac_debug_info): a flat JSON object of integers, as
// dac_debug_info writes, with its length (without the NUL) in *length even
// when capacity is too small. 0: written; 1: the backend does not serve
// torch's container in this process; 2: bad arguments. torch's own
// _get_debug_info() keeps torch's two keys.
extern "C" __attribute__((visibility("default"))) int dat_impl_debug_info(char* buf, size_t capacity,
                                                                          size_t* length) {
  if (int rc = json_call_refused(buf, capacity, length))
    return rc;
  void* self = instance.load(std::memory_order_acquire);
  const int64_t made = counts.made.load(), destroyed = counts.destroyed.load();
  // Made and not yet destroyed: those torch still holds (a ContextPtr in
  // its engine, a Python object), or a live context hosts.
  int n = snprintf(buf, capacity,
                   "{\"torch_cleanup_delivered\":%lld,\"torch_cleanup_failed\":%lld,\"torch_cleanup_gone\":%lld,"
                   "\"torch_cleanup_handed\":%lld,"
                   "\"torch_cleanup_outstanding\":%lld,\"torch_contexts_alive\":%lld,\"torch_contexts_made\":%lld,"
                   "\"torch_native_contexts\":%lld,\"torch_origin_probes\":%lld,\"torch_orphans_released\":%lld,"
                   "\"torch_workers_gone\":%lld}",
                   static_cast<long long>(counts.cleanup_delivered.load()),
                   static_cast<long long>(counts.cleanup_torch_failed.load()),
                   static_cast<long long>(counts.cleanup_gone.load()),
                   static_cast<long long>(counts.cleanup_handed.load()),
                   static_cast<long long>(std::max<int64_t>(0, outstanding.load())),
                   static_cast<long long>(made - destroyed), static_cast<long long>(made),
                   static_cast<long long>(self != nullptr ? real.numAutogradContexts(self) : 0),
                   static_cast<long long>(counts.origin_probes.load()),
                   static_cast<long long>(counts.orphans_released.load()),
                   static_cast<long long>(counts.workers_gone.load()));
  if (n < 0)
    return 2;
  *length = static_cast<size_t>(n);
  return 0;
}

// Waits until every cleanup message this process handed to torch's agent
// has been answered by its worker (the context released there) or has
// finally failed (for distautograd.torch.flush): first the library's own
// (those still queued or awaiting a retry because no agent could take
// them: dac_cleanup_flush), then torch's. timeout_ms < 0: no bound. Writes
// how many are still pending to *pending. 0: none pending; 1: the backend
// does not serve torch's container in this process; 2: bad arguments; 13
// (DAC_ERR_TIMEOUT): some still pending when the time ran out.
extern "C" __attribute__((visibility("default"))) int dat_impl_flush(int64_t timeout_ms, int64_t* pending) {
  if (pending == nullptr)
    return 2;
  if (!started.load())
    return 1;
  using clock = std::chrono::steady_clock;
  const bool bounded = timeout_ms >= 0;
  const auto deadline = bounded ? clock::now() + std::chrono::milliseconds(timeout_ms) : clock::time_point::max();
  auto left_ms = [&] {
    if (!bounded)
      return std::numeric_limits<int64_t>::max();
    return std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count());
  };
  int64_t queued = 0;
  dac_cleanup_flush(left_ms(), &queued);
  flush_waiters.fetch_add(1);
  {
    std::unique_lock<std::mutex> lk(flush_mu);
    while (outstanding.load() > 0 && clock::now() < deadline) {
      if (bounded)
        flush_cv.wait_until(lk, deadline);
      else
        flush_cv.wait(lk);
    }
  }
  flush_waiters.fetch_sub(1);
  if (queued > 0)  // handed over meanwhile, or still queued: count what is left now
    dac_cleanup_flush(0, &queued);
  *pending = queued + std::max<int64_t>(0, outstanding.load());
  return *pending == 0 ? 0 : DAC_ERR_TIMEOUT;
}

// Every context of this process, as distautograd.torch.contexts() shows
// them: a JSON array of objects (id, origin_worker, known_workers sorted,
// age_s, idle_s), sorted by id, with its length (without the NUL) in
// *length even when capacity is too small. 0: written; 1: the backend does
// not serve torch's container in this process; 2: bad arguments; 3:
// distributed autograd is not initialized (dac_last_error() has torch's
// message).
extern "C" __attribute__((visibility("default"))) int dat_impl_contexts(char* buf, size_t capacity,
                                                                        size_t* length) {
  if (int rc = json_call_refused(buf, capacity, length))
    return rc;
  int32_t worker = 0;
  if (dac_worker_id(&worker) != DAC_OK)
    return 3;  // not initialized: dac_last_error() says so, in torch's words
  auto all = list_contexts(true);
  std::sort(all.begin(), all.end(), [](const ContextView& a, const ContextView& b) { return a.id < b.id; });
  std::string out = "[";
  for (const auto& v : all) {
    char head[160];
    snprintf(head, sizeof head, "%s{\"id\":%lld,\"origin_worker\":%d,\"known_workers\":[", out.size() > 1 ? "," : "",
             static_cast<long long>(v.id), v.origin);
    out += head;
    for (size_t i = 0; i < v.known.size(); i++)
      out += (i ? "," : "") + std::to_string(v.known[i]);
    char tail[96];
    snprintf(tail, sizeof tail, "],\"age_s\":%.3f,\"idle_s\":%.3f}", v.age_ms / 1000.0, v.idle_ms / 1000.0);
    out += tail;
  }
  out += "]";
  *length = out.size();
  if (capacity > 0) {
    size_t n = std::min(out.size(), capacity - 1);
    memcpy(buf, out.data(), n);
    buf[n] = 0;
  }
  return 0;
}
