// distautograd.hpp: the C++ interface of libdistautograd, header-only over
// the C ABI of distautograd.h.
//
// It is a drop-in for the container part of PyTorch 1.13's C++ API
// (torch/csrc/distributed/autograd/context/container.h and context.h): a
// program written against torch::distributed::autograd::DistAutogradContainer
// compiles against this header by changing its include and namespace, e.g.
//
//     #include <distautograd.hpp>
//     namespace dist_autograd = distautograd;  // was torch::distributed::autograd
//
//     auto& container = dist_autograd::DistAutogradContainer::init(3);
//     dist_autograd::ContextPtr ctx = container.newContext();
//     ctx->addKnownWorkerId(4);
//     container.releaseContext(ctx->contextId());
//
// The signatures are the native ones (a worker id is int16_t, the native
// rpc::worker_id_t; numAutogradContexts returns size_t; ...). Every failure
// throws distautograd::Error, a std::runtime_error whose what() is byte for
// byte the message the native component raises (its first line: the native
// c10::Error appends a backtrace) and whose status() is the DAC_ERR_* code.
//
// Where it differs from the native API, on purpose: docs/torch-compat.md
// lists each difference, and why (send and recv functions, for one, are
// the host's opaque uint64_t values).
//
// What it adds: retrieveContextIfPresent (nullptr if absent), ContextGuard
// (a context for the length of a scope), retrieveRecvFunction, the
// library's own container operations (setMaxContexts, releaseContextsOfWorker,
// reapIdleContexts, contexts, debugInfo), and the hooks of the release fan-out through
// which the host's RPC layer delivers cleanup messages (setCleanupSender,
// setLogHook, setCleanupOptions, cleanupStats, cleanupFlush).
//
// Requires C++14. Thread-safe as the C ABI is: the current context id is per
// OS thread, exactly as the native thread_local.
#ifndef DISTAUTOGRAD_HPP
#define DISTAUTOGRAD_HPP

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "distautograd.h"

namespace distautograd {

// The type of a worker id in the native C++ API (rpc::worker_id_t). A worker
// id w in [32768, 65535] is the int16_t value w - 65536, as there.
using worker_id_t = int16_t;

// Error is what every failing operation throws: what() is the message the C
// ABI left (the native message where the native component raises one),
// status() its DAC_ERR_* code.
class Error : public std::runtime_error {
 public:
  Error(int status, const std::string& message) : std::runtime_error(message), status_(status) {}

  // Returns the DAC_ERR_* status code of the failure.
  int status() const noexcept { return status_; }

  // Returns the name of status(), e.g. "DAC_ERR_NOT_FOUND".
  const char* statusName() const noexcept { return dac_status_string(status_); }

 private:
  int status_;
};

class DistAutogradContext;
class DistAutogradContainer;

// A reference to a context; it keeps the context readable after the context
// was released from the container. The last copy drops the library's handle.
using ContextPtr = std::shared_ptr<DistAutogradContext>;

namespace detail {

struct ContextObject;

// DAC_INVALID_ID without the C cast (which -Wold-style-cast rejects in
// callers' builds): never a context id.
constexpr int64_t kInvalidId = -1;
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#endif
static_assert(kInvalidId == DAC_INVALID_ID, "kInvalidId is DAC_INVALID_ID");
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

// Throws the calling thread's last error if status is not DAC_OK; it reads
// the message at once, before anything else can fail on this thread.
inline void check(int status) {
  if (status != DAC_OK) {
    throw Error(status, dac_last_error());
  }
}

// The C ABI carries worker ids as int32_t in [0, 65535]; the C++ API as the
// native int16_t. These convert between the two without loss.
inline int32_t toC(worker_id_t w) noexcept { return static_cast<int32_t>(static_cast<uint16_t>(w)); }
inline worker_id_t fromC(int32_t w) noexcept { return static_cast<worker_id_t>(static_cast<uint16_t>(w)); }

inline ContextPtr wrap(dac_context* handle, int64_t id = kInvalidId);

// Lists (message id, function) pairs with the two-call protocol of
// dac_context_send_functions; retries while the list grows under us.
template <typename ListFn>
std::unordered_map<int64_t, uint64_t> listFunctions(dac_context* handle, ListFn list) {
  std::vector<int64_t> ids;
  std::vector<uint64_t> fns;
  size_t count = 0;
  check(list(handle, nullptr, nullptr, 0, &count));
  while (count > ids.size()) {
    ids.resize(count);
    fns.resize(count);
    check(list(handle, ids.data(), fns.data(), ids.size(), &count));
  }
  std::unordered_map<int64_t, uint64_t> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    out.emplace(ids[i], fns[i]);
  }
  return out;
}

}  // namespace detail

// DistAutogradContext is the state of one distributed autograd pass on this
// worker, reached through a ContextPtr (make one with DistAutogradContainer).
class DistAutogradContext {
 public:
  DistAutogradContext(const DistAutogradContext&) = delete;
  DistAutogradContext& operator=(const DistAutogradContext&) = delete;
  DistAutogradContext(DistAutogradContext&&) = delete;
  DistAutogradContext& operator=(DistAutogradContext&&) = delete;

  // Returns the context id. It is read through the handle once, where the
  // call that made this object did not know it already, and then kept: this
  // object holds a reference, so its handle's id cannot change.
  int64_t contextId() const {
    int64_t id = id_.load(std::memory_order_relaxed);
    if (id == detail::kInvalidId) {
      detail::check(dac_context_id(handle_, &id));
      id_.store(id, std::memory_order_relaxed);
    }
    return id;
  }

  // Records that this pass sent an RPC to workerId, so that releasing the
  // context tells that worker to release its copy. Adding one twice is a no-op.
  void addKnownWorkerId(const worker_id_t workerId) {
    detail::check(dac_context_add_known_worker_id(handle_, detail::toC(workerId)));
  }

  // Returns the known worker ids: the workers this pass sent RPCs to.
  std::unordered_set<worker_id_t> getKnownWorkerIds() const {
    std::vector<int32_t> ids;
    size_t count = 0;
    detail::check(dac_context_known_worker_ids(handle_, nullptr, 0, &count));
    while (count > ids.size()) {
      ids.resize(count);
      detail::check(dac_context_known_worker_ids(handle_, ids.data(), ids.size(), &count));
    }
    std::unordered_set<worker_id_t> out;
    for (size_t i = 0; i < count; ++i) {
      out.insert(detail::fromC(ids[i]));
    }
    return out;
  }

  // Registers the host's send function fn, an opaque value, under
  // autograd_message_id; a second one under the same id throws.
  void addSendFunction(uint64_t fn, int64_t autograd_message_id) {
    detail::check(dac_context_add_send_function(handle_, autograd_message_id, fn));
  }

  // Registers the host's recv function fn under autograd_message_id.
  void addRecvFunction(uint64_t fn, int64_t autograd_message_id) {
    detail::check(dac_context_add_recv_function(handle_, autograd_message_id, fn));
  }

  // Returns the send function under autograd_message_id, or throws "Could not
  // find send function for autograd message id: 7".
  uint64_t retrieveSendFunction(int64_t autograd_message_id) {
    uint64_t fn = 0;
    detail::check(dac_context_send_function(handle_, autograd_message_id, &fn));
    return fn;
  }

  // Returns the recv function under autograd_message_id, or throws.
  uint64_t retrieveRecvFunction(int64_t autograd_message_id) {
    uint64_t fn = 0;
    detail::check(dac_context_recv_function(handle_, autograd_message_id, &fn));
    return fn;
  }

  // Returns every send function, keyed by autograd message id.
  std::unordered_map<int64_t, uint64_t> sendFunctions() const {
    return detail::listFunctions(handle_, dac_context_send_functions);
  }

  // Returns every recv function, keyed by autograd message id.
  std::unordered_map<int64_t, uint64_t> recvFunctions() const {
    return detail::listFunctions(handle_, dac_context_recv_functions);
  }

  // Returns the C handle, for calls into distautograd.h; it lives as long as
  // this object (take your own with dac_context_ref to keep it longer).
  dac_context* handle() const noexcept { return handle_; }

 private:
  friend struct detail::ContextObject;
  DistAutogradContext(dac_context* handle, int64_t id) noexcept : handle_(handle), id_(id) {}
  // Drops the handle's reference (a failure is ignored: a destructor must
  // not throw, and the handle is then dead already).
  ~DistAutogradContext() { (void)dac_context_unref(handle_); }

  dac_context* const handle_;
  mutable std::atomic<int64_t> id_;  // detail::kInvalidId until known
};

namespace detail {

// What every ContextPtr points to: one block for the object and the
// shared_ptr's counts, as make_shared makes, but taken from a free list of
// the calling thread's (BlockAllocator): a lookup's cost was mostly
// malloc's and free's.
struct ContextObject final : DistAutogradContext {
  ContextObject(dac_context* handle, int64_t id) noexcept : DistAutogradContext(handle, id) {}
};

// The blocks of one type a thread keeps for reuse. Trivially destructible,
// so that it stays usable while the thread ends; BlockListOwner gives the
// blocks back to the heap then.
template <typename T>
struct BlockList {
  static constexpr int kCapacity = 32;
  void* blocks[kCapacity];
  int count;
  bool owned;   // a BlockListOwner will empty it at thread exit
  bool closed;  // it has: blocks go straight back to the heap
};

template <typename T>
inline BlockList<T>& blockList() noexcept {
  static thread_local BlockList<T> list{};
  return list;
}

template <typename T>
struct BlockListOwner {
  ~BlockListOwner() {
    BlockList<T>& l = blockList<T>();
    l.closed = true;
    while (l.count > 0) {
      ::operator delete(l.blocks[--l.count]);
    }
  }
};

// An allocator of single blocks through the calling thread's BlockList; a
// block freed on another thread joins that thread's list. Any other request
// goes to the heap.
template <typename T>
struct BlockAllocator {
  using value_type = T;
  BlockAllocator() noexcept = default;
  template <typename U>
  BlockAllocator(const BlockAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    BlockList<T>& l = blockList<T>();
    if (n == 1 && l.count > 0) {
      return static_cast<T*>(l.blocks[--l.count]);
    }
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    BlockList<T>& l = blockList<T>();
    if (n == 1 && !l.closed && l.count < BlockList<T>::kCapacity) {
      if (!l.owned) {
        l.owned = true;
        static thread_local BlockListOwner<T> owner;  // registers the emptying at thread exit
        (void)owner;
      }
      l.blocks[l.count++] = p;
      return;
    }
    ::operator delete(p);
  }
  template <typename U>
  bool operator==(const BlockAllocator<U>&) const noexcept {
    return true;
  }
  template <typename U>
  bool operator!=(const BlockAllocator<U>&) const noexcept {
    return false;
  }
};

// Takes ownership of the new reference that a successful call returned
// (never nullptr). id: the handle's context id where the caller knows it,
// else kInvalidId. (Having no nullptr branch also keeps GCC from warning
// about contextId()'s atomic load through a null pointer in callers.)
inline ContextPtr wrap(dac_context* handle, int64_t id) {
  try {
    return std::allocate_shared<ContextObject>(BlockAllocator<ContextObject>(), handle, id);
  } catch (...) {
    (void)dac_context_unref(handle);
    throw;
  }
}

}  // namespace detail

// ---- Release fan-out ----

// CleanupSender delivers one cleanup message: tell worker workerId (the
// value given to addKnownWorkerId) to release its copy of context contextId,
// through the host's RPC layer; the receiver calls releaseContextIfPresent.
// Returning true means delivered; false, or throwing anything, means the
// attempt failed and the library retries it. It runs on a library thread,
// outside every lock of the container, never on the releasing thread, and
// may call any function of this header.
using CleanupSender = std::function<bool(worker_id_t workerId, int64_t contextId)>;

// LogHook receives the library's log lines, with a DAC_LOG_* level, on
// library threads. An exception it throws is swallowed.
using LogHook = std::function<void(int level, const std::string& message)>;

// CleanupOptions tune the fan-out; a zero field takes the library's default
// (dac_cleanup_options: the defaults are distautograd.h's
// DAC_CLEANUP_DEFAULT_* macros).
struct CleanupOptions {
  int32_t maxAttempts = 0;                       // attempts per message, the first included
  std::chrono::microseconds initialBackoff{0};   // wait before the first retry, doubling per retry
  std::chrono::microseconds maxBackoff{0};       // longest wait between attempts
  int64_t maxPending = 0;                        // messages queued or awaiting a retry (at most
                                                 // DAC_CLEANUP_MAX_PENDING_LIMIT)
};

// CleanupStats are the fan-out's counters of cleanup messages, one message
// per known worker of a released context.
struct CleanupStats {
  int64_t sent = 0;     // delivered
  int64_t retried = 0;  // attempts after a failed one
  int64_t failed = 0;   // given up on after maxAttempts
  int64_t dropped = 0;  // refused: the queue was full
  int64_t skipped = 0;  // not sent: no sender was set
  int64_t pending = 0;  // queued, being sent or awaiting a retry, now
};

// ContextInfo is one context as DistAutogradContainer::contexts() lists it.
struct ContextInfo {
  int64_t id = 0;
  worker_id_t originWorker = 0;            // whose pass it is: the id's top 16 bits
  std::vector<worker_id_t> knownWorkers;   // the workers its release tells, sorted
  int64_t ageMs = 0;                       // since it was stored here
  int64_t idleMs = 0;                      // since it was last created, retrieved or changed
};

namespace detail {

// Where the C trampolines below find the current C++ hook. The library may
// call a hook a moment after it was replaced (it read the pointer just
// before), so what it holds is always one of the trampolines, and a call
// takes its own reference to the std::function it runs: replacing or
// unsetting a hook never destroys one in use. The slot is never destroyed,
// so that library threads still running during static destruction find it.
template <typename Fn>
struct HookSlot {
  std::mutex mu;
  std::shared_ptr<const Fn> fn;

  std::shared_ptr<const Fn> get() {
    std::lock_guard<std::mutex> lock(mu);
    return fn;
  }
  void set(std::shared_ptr<const Fn> f) {
    std::lock_guard<std::mutex> lock(mu);
    fn.swap(f);
  }  // the old one, if this held the last reference, is destroyed here, unlocked
};

inline HookSlot<CleanupSender>& senderSlot() {
  static HookSlot<CleanupSender>* const slot = new HookSlot<CleanupSender>();
  return *slot;
}

inline HookSlot<LogHook>& logSlot() {
  static HookSlot<LogHook>* const slot = new HookSlot<LogHook>();
  return *slot;
}

// The dac_cleanup_sender of every CleanupSender: nothing thrown escapes into
// the library (a throw counts as a failed attempt).
inline int callCleanupSender(void*, int32_t worker_id, int64_t context_id) noexcept {
  try {
    const std::shared_ptr<const CleanupSender> fn = senderSlot().get();
    if (!fn) {
      return 1;  // unset while this call was on its way: not delivered
    }
    return (*fn)(fromC(worker_id), context_id) ? 0 : 1;
  } catch (...) {
    return 1;
  }
}

// The dac_log_hook of every LogHook.
inline void callLogHook(void*, int level, const char* message) noexcept {
  try {
    const std::shared_ptr<const LogHook> fn = logSlot().get();
    if (fn) {
      (*fn)(level, std::string(message != nullptr ? message : ""));
    }
  } catch (...) {
  }
}

}  // namespace detail

// DistAutogradContainer is the process-wide container of contexts: init() it
// once with this worker's id, then reach it with getInstance().
class DistAutogradContainer {
 public:
  DistAutogradContainer(const DistAutogradContainer&) = delete;
  DistAutogradContainer& operator=(const DistAutogradContainer&) = delete;
  DistAutogradContainer(DistAutogradContainer&&) = delete;
  DistAutogradContainer& operator=(DistAutogradContainer&&) = delete;

  // Initializes the container for worker_id, in [0, 65535], and returns it. A
  // second call with the same id returns it again; with a different id (or,
  // as natively, any second call for an id >= 32768) it throws.
  static DistAutogradContainer& init(int64_t worker_id) {
    detail::check(dac_init(worker_id));
    return instance();
  }

  // Returns the container, or throws "Need to initialize distributed autograd
  // using torch.distributed.autograd.init()" before init().
  static DistAutogradContainer& getInstance() {
    int32_t worker = 0;
    detail::check(dac_worker_id(&worker));
    return instance();
  }

  // Creates a context with the thread's next context id (dac_context_new)
  // and makes it the calling thread's current context; throws if the
  // thread already has one.
  const ContextPtr newContext() {
    dac_context* h = nullptr;
    int64_t id = detail::kInvalidId;
    detail::check(dac_context_new_id(&h, &id));
    return detail::wrap(h, id);
  }

  // Removes the context (throws "Could not find autograd context with id: N"
  // if there is none), resets the calling thread's current id if it is that
  // one, and tells the context's known workers to release theirs.
  void releaseContext(int64_t context_id) { detail::check(dac_context_release(context_id)); }

  // As releaseContext, but a missing context is a silent no-op.
  void releaseContextIfPresent(int64_t context_id) {
    detail::check(dac_context_release_if_present(context_id, nullptr));
  }

  // As releaseContextIfPresent, after adding workers to the context's known
  // workers (one call where a host that records the workers of a pass
  // itself would otherwise add each, then release); returns whether a
  // context was released. Not in the native API.
  bool releaseContextWithWorkers(int64_t context_id, const std::vector<worker_id_t>& workers) {
    std::vector<int32_t> ids(workers.size());
    for (size_t i = 0; i < workers.size(); i++) ids[i] = detail::toC(workers[i]);
    int released = 0;
    detail::check(dac_context_release_with_workers(context_id, ids.data(), ids.size(), &released));
    return released != 0;
  }

  // Returns normally if the context exists, else throws "Could not find
  // autograd context with id: N".
  void isValidContext(int64_t context_id) { detail::check(dac_context_is_valid(context_id)); }

  // Returns the context, or throws "Could not find autograd context with id: N".
  ContextPtr retrieveContext(int64_t context_id) {
    dac_context* h = nullptr;
    detail::check(dac_context_retrieve(context_id, &h));
    return detail::wrap(h, context_id);
  }

  // Returns the context, or nullptr if there is none. (Not in the native API.)
  ContextPtr retrieveContextIfPresent(int64_t context_id) {
    dac_context* h = nullptr;
    detail::check(dac_context_retrieve_if_present(context_id, &h));
    return h == nullptr ? nullptr : detail::wrap(h, context_id);
  }

  // Returns the calling thread's current context; throws if the thread has
  // none, or if its current id names a context that was released.
  ContextPtr currentContext() {
    dac_context* h = nullptr;
    detail::check(dac_context_current(&h));
    return detail::wrap(h);
  }

  // Returns whether the calling thread has a current context id (a stale one,
  // its context released, counts: it is not looked up).
  bool hasValidContext() const {
    int has = 0;
    detail::check(dac_has_valid_context(&has));
    return has != 0;
  }

  // Returns the next autograd message id, for a send/recv function pair.
  int64_t newAutogradMessageId() {
    int64_t id = 0;
    detail::check(dac_new_autograd_message_id(&id));
    return id;
  }

  // Returns the context, creating and storing it if there is none; does not
  // change the calling thread's current context.
  ContextPtr getOrCreateContext(int64_t context_id) {
    dac_context* h = nullptr;
    detail::check(dac_context_get_or_create(context_id, &h));
    return detail::wrap(h, context_id);
  }

  // Returns the largest id this worker's counters can reach:
  // (worker_id << 48) | (2^48 - 1), in signed 64-bit arithmetic.
  int64_t getMaxId() {
    int64_t id = 0;
    detail::check(dac_max_id(&id));
    return id;
  }

  // Returns this worker's id as the native int16_t (40000 is -25536).
  worker_id_t getWorkerId() const {
    int32_t worker = 0;
    detail::check(dac_worker_id(&worker));
    return detail::fromC(worker);
  }

  // Sets the calling thread's current context id; throws "Already have an
  // autograd context id for this thread." if one is set.
  static void setCurrentContextId(int64_t contextId) { detail::check(dac_set_current_context_id(contextId)); }

  // Sets the calling thread's current context id unconditionally.
  static void forceCurrentContextId(int64_t contextId) { detail::check(dac_force_current_context_id(contextId)); }

  // Sets the calling thread's current context id back to -1.
  void clearCurrentContext() { detail::check(dac_clear_current_context()); }

  // Returns how many contexts the container holds.
  size_t numAutogradContexts() const {
    int64_t n = 0;
    detail::check(dac_num_contexts(&n));
    return static_cast<size_t>(n);
  }

  // Returns the calling thread's current context id, or -1.
  static int64_t currentContextId() {
    int64_t id = 0;
    detail::check(dac_current_context_id(&id));
    return id;
  }

  // ---- distautograd's own, not in the native API ----

  // Caps the number of live contexts (0: no cap); past it newContext and
  // getOrCreateContext throw (DAC_ERR_LIMIT).
  void setMaxContexts(int64_t max_contexts) { detail::check(dac_set_max_contexts(max_contexts)); }

  // Releases every context created by workerId (a worker that died mid-pass)
  // and returns how many.
  int64_t releaseContextsOfWorker(worker_id_t workerId) {
    int64_t n = 0;
    detail::check(dac_release_contexts_of_worker(detail::toC(workerId), &n));
    return n;
  }

  // Releases every context untouched for max_idle_ms milliseconds and
  // returns how many.
  int64_t reapIdleContexts(int64_t max_idle_ms) {
    int64_t n = 0;
    detail::check(dac_reap_idle_contexts(max_idle_ms, &n));
    return n;
  }

  // Returns every context stored now, sorted by id (dac_context_list): the
  // view of what this worker holds. Listing is not a use.
  std::vector<ContextInfo> contexts() const {
    struct Listed {  // the references dac_context_list took, dropped however this ends
      std::vector<dac_context*> h;
      size_t n = 0;
      ~Listed() { dac_context_unref_many(h.data(), n); }
    } listed;
    size_t count = 0;
    detail::check(dac_context_list(nullptr, 0, &count));
    for (;;) {
      listed.h.resize(count + count / 2 + 1);
      detail::check(dac_context_list(listed.h.data(), listed.h.size(), &count));
      listed.n = std::min(count, listed.h.size());
      if (count <= listed.h.size())
        break;
      dac_context_unref_many(listed.h.data(), listed.n);
      listed.n = 0;
    }
    std::vector<ContextInfo> out(listed.n);
    std::vector<int32_t> ids;
    for (size_t i = 0; i < listed.n; ++i) {
      ContextInfo& info = out[i];
      detail::check(dac_context_id(listed.h[i], &info.id));
      info.originWorker = static_cast<worker_id_t>(static_cast<uint64_t>(info.id) >> 48);
      detail::check(dac_context_times(listed.h[i], &info.ageMs, &info.idleMs));
      size_t k = ids.size();
      do {  // the known workers may grow meanwhile: again with room for them
        ids.resize(std::max(k, ids.size()));
        detail::check(dac_context_known_worker_ids(listed.h[i], ids.data(), ids.size(), &k));
      } while (k > ids.size());
      for (size_t j = 0; j < k; ++j)
        info.knownWorkers.push_back(detail::fromC(ids[j]));
      std::sort(info.knownWorkers.begin(), info.knownWorkers.end(),
                [](worker_id_t a, worker_id_t b) { return detail::toC(a) < detail::toC(b); });
    }
    std::sort(out.begin(), out.end(), [](const ContextInfo& a, const ContextInfo& b) { return a.id < b.id; });
    return out;
  }

  // Returns the debug information as a JSON object of integer values
  // (num_autograd_contexts, num_current_backward_passes, ...).
  std::string debugInfo() const {
    std::string out;
    size_t length = 0;
    detail::check(dac_debug_info(nullptr, 0, &length));
    while (length + 1 > out.size()) {
      out.resize(length + 1);
      detail::check(dac_debug_info(&out[0], out.size(), &length));
    }
    out.resize(length);
    return out;
  }

  // ---- The release fan-out (static: usable before init) ----

  // Sets the cleanup sender (an empty function: none; releases then tell
  // nobody and count skipped, as the native component does without an RPC
  // agent). Each release of a context with known workers queues one message
  // per worker and returns at once; the library calls sender for each, on
  // its own threads, retrying failures with backoff up to maxAttempts. The
  // sender must stay callable until it is replaced and the calls in
  // progress have returned (cleanupFlush waits for those): unset it before
  // tearing down what it uses.
  static void setCleanupSender(CleanupSender sender) {
    if (!sender) {
      detail::check(dac_set_cleanup_sender(nullptr, nullptr));
      detail::senderSlot().set(nullptr);
      return;
    }
    detail::senderSlot().set(std::make_shared<const CleanupSender>(std::move(sender)));
    detail::check(dac_set_cleanup_sender(detail::callCleanupSender, nullptr));
  }

  // Sets where the library's log lines go (an empty function: the default,
  // warnings and errors to stderr).
  static void setLogHook(LogHook hook) {
    if (!hook) {
      detail::check(dac_set_log_hook(nullptr, nullptr));
      detail::logSlot().set(nullptr);
      return;
    }
    detail::logSlot().set(std::make_shared<const LogHook>(std::move(hook)));
    detail::check(dac_set_log_hook(detail::callLogHook, nullptr));
  }

  // Tunes the fan-out for attempts from now on (a waiting retry moves
  // earlier where the new backoffs are shorter, never later); throws Error
  // (DAC_ERR_INVALID_ARGUMENT) for a negative value, or a maxPending larger
  // than before once messages were sent.
  static void setCleanupOptions(const CleanupOptions& options) {
    dac_cleanup_options o = DAC_CLEANUP_OPTIONS_INIT;
    o.max_attempts = options.maxAttempts;
    o.initial_backoff_us = options.initialBackoff.count();
    o.max_backoff_us = options.maxBackoff.count();
    o.max_pending = options.maxPending;
    detail::check(dac_cleanup_configure(&o));
  }

  // Returns the fan-out's counters (each read once, not all at one instant).
  static CleanupStats cleanupStats() {
    dac_cleanup_counters c{};
    c.size = sizeof c;
    detail::check(dac_cleanup_stats(&c));
    CleanupStats s;
    s.sent = c.sent;
    s.retried = c.retried;
    s.failed = c.failed;
    s.dropped = c.dropped;
    s.skipped = c.skipped;
    s.pending = c.pending;
    return s;
  }

  // Waits up to timeout for every pending cleanup message to be delivered or
  // given up on, and returns how many are still pending (0: none). Flush
  // before shutting the RPC layer down.
  static int64_t cleanupFlush(std::chrono::milliseconds timeout) {
    int64_t pending = 0;
    const int rc = dac_cleanup_flush(timeout.count(), &pending);
    if (rc != DAC_ERR_TIMEOUT) {
      detail::check(rc);
    }
    return pending;
  }

 private:
  DistAutogradContainer() = default;
  ~DistAutogradContainer() = default;

  // The one instance: it holds no state (the library does), so it needs no
  // teardown order and is safe to use from static destructors.
  static DistAutogradContainer& instance() {
    static DistAutogradContainer* const c = new DistAutogradContainer();
    return *c;
  }
};

// ContextGuard opens a new context for the calling thread for the length of a
// scope, as Python's `with dist_autograd.context() as context_id:` does: the
// constructor calls newContext() (and throws what it throws); the destructor
// releases the context if it is still there, on every exit, exceptions
// included, and never throws. If another thread released the context first,
// the destructor still clears this thread's current id when it is the
// guard's, so the next guard on the thread can open a context. Use it on the
// thread that created it.
//
//     {
//       distautograd::ContextGuard guard;
//       run_forward_and_backward(guard.contextId());
//     }  // released here
class ContextGuard {
 public:
  ContextGuard() : context_(DistAutogradContainer::getInstance().newContext()), id_(context_->contextId()) {}

  ~ContextGuard() {
    // The C calls never throw; a failure here (a forked child, say) has no
    // one to report to.
    (void)dac_context_release_if_present(id_, nullptr);
    int64_t current = -1;
    if (dac_current_context_id(&current) == DAC_OK && current == id_) {
      (void)dac_clear_current_context();  // released elsewhere: a stale id
    }
  }

  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;
  ContextGuard(ContextGuard&&) = delete;
  ContextGuard& operator=(ContextGuard&&) = delete;

  // Returns the id of the guarded context.
  int64_t contextId() const noexcept { return id_; }

  // Returns the guarded context; it stays readable after the guard released it.
  const ContextPtr& context() const noexcept { return context_; }

 private:
  ContextPtr context_;
  int64_t id_;
};

}  // namespace distautograd

#endif  // DISTAUTOGRAD_HPP
