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
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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
#include <unordered_set>
#include <vector>

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/distributed/rpc/rpc_agent.h>
#include <torch/csrc/distributed/rpc/rpc_command_base.h>

#include <distautograd.h>

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

// ---- The cleanup sender: torch's own CleanupAutogradContextReq ----------

// Hands the message to the current RPC agent, which sends it with torch's
// own retries (20, as the native sendReleaseContextRpc) and returns: it
// never waits for the network, so it is declared non-blocking and runs on
// the releasing thread, as the native sendReleaseContextRpc does (waking a
// library thread per release cost more than the send). What finally fails
// is counted.
int send_cleanup(void*, int32_t worker, int64_t context_id) {
  if (exiting.load(std::memory_order_relaxed) || !rpc::RpcAgent::isCurrentRpcAgentSet())
    return 1;  // retried with backoff; given up on and counted if it stays so
  try {
    auto agent = rpc::RpcAgent::getCurrentRpcAgent();
    rpc::RpcRetryOptions options;
    options.maxRetries = 20;
    auto fut = agent->sendWithRetries(agent->getWorkerInfo(static_cast<rpc::worker_id_t>(worker)),
                                      ta::CleanupAutogradContextReq(context_id).toMessage(), options);
    fut->addCallback([worker](rpc::JitFuture& f) {
      if (!f.hasError()) {
        counts.cleanup_delivered.fetch_add(1, std::memory_order_relaxed);
      } else {
        counts.cleanup_torch_failed.fetch_add(1, std::memory_order_relaxed);
        TorchLog(kTorchContainerFile, kLineCouldNotRelease, kTorchError).stream()
            << "Could not release Dist Autograd Context on node " << worker << ": " << f.tryRetrieveErrorMessage();
      }
    });
    counts.cleanup_handed.fetch_add(1, std::memory_order_relaxed);
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

// DISTAUTOGRAD_REAP_IDLE_MS=N: a thread releases every context idle for N
// ms (what a worker that died mid-pass left here: no cleanup RPC will come
// for it), fanning out as a release does. Off by default: a pass that
// legitimately holds a context idle longer than N would lose it.
void start_reaper() {
  const char* env = getenv("DISTAUTOGRAD_REAP_IDLE_MS");
  if (env == nullptr || *env == 0)
    return;
  char* end = nullptr;
  long long ms = strtoll(env, &end, 10);
  if (end == env || *end != 0 || ms <= 0) {
    fprintf(stderr, "distautograd-torch: DISTAUTOGRAD_REAP_IDLE_MS=%s is not a positive number of ms; no reaper\n", env);
    return;
  }
  reap_idle_ms.store(ms, std::memory_order_relaxed);
  std::thread([ms] {
    const auto period = std::chrono::milliseconds(std::max<long long>(20, ms / 4));
    while (!exiting.load(std::memory_order_relaxed)) {
      std::this_thread::sleep_for(period);
      dac_reap_idle_contexts(ms, nullptr);
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
  if (const char* cap = getenv("DISTAUTOGRAD_MAX_CONTEXTS"); cap != nullptr && *cap != 0) {
    char* end = nullptr;
    long long n = strtoll(cap, &end, 10);
    if (end == cap || *end != 0 || n < 0 || dac_set_max_contexts(n) != DAC_OK)
      fprintf(stderr, "distautograd-torch: DISTAUTOGRAD_MAX_CONTEXTS=%s is not a count >= 0; no cap\n", cap);
  }
  start_reaper();
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
  std::vector<int32_t> ids;
  uint64_t v = 0;
  check(dac_context_host_value(h.h, &v));
  if (v != 0) {
    auto known = box_of(v)->object()->getKnownWorkerIds();
    ids.reserve(known.size());
    for (auto w : known)  // torch's int16_t worker id: 40000 is -25536
      ids.push_back(static_cast<int32_t>(static_cast<uint16_t>(w)));
  }
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
  if (length == nullptr || (buf == nullptr && capacity != 0))
    return 2;
  if (!started.load())
    return 1;
  void* self = instance.load(std::memory_order_acquire);
  const int64_t made = counts.made.load(), destroyed = counts.destroyed.load();
  // Made and not yet destroyed: those torch still holds (a ContextPtr in
  // its engine, a Python object), or a live context hosts.
  int n = snprintf(buf, capacity,
                   "{\"torch_cleanup_delivered\":%lld,\"torch_cleanup_failed\":%lld,\"torch_cleanup_handed\":%lld,"
                   "\"torch_contexts_alive\":%lld,\"torch_contexts_made\":%lld,\"torch_native_contexts\":%lld}",
                   static_cast<long long>(counts.cleanup_delivered.load()),
                   static_cast<long long>(counts.cleanup_torch_failed.load()),
                   static_cast<long long>(counts.cleanup_handed.load()), static_cast<long long>(made - destroyed),
                   static_cast<long long>(made),
                   static_cast<long long>(self != nullptr ? real.numAutogradContexts(self) : 0));
  if (n < 0)
    return 2;
  *length = static_cast<size_t>(n);
  return 0;
}
