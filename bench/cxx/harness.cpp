// harness.cpp: the C-level benchmark of distautograd against the native
// component (PyTorch 1.13's DistAutogradContainer in Debian's
// libtorch_cpu.so, called through capi_test/cpp/native_decls.hpp as the C++
// differential test calls it). One program links both, so every operation is
// measured on both in the same process, in alternation: sample distautograd,
// sample native, then the other order, rep after rep; the driver (bench/
// main.go, `make bench`) reports the medians and their ratio.
//
// Rows of two kinds:
//   - "C ABI" rows call distautograd's dac_* functions directly (what a C
//     runtime, and the Python bindings, pay) against the native member
//     functions;
//   - "C++ API" rows run one template, word for word, on
//     distautograd::DistAutogradContainer (distautograd.hpp) and on
//     torch::distributed::autograd::DistAutogradContainer.
// Every row that returns a context drops it inside the loop (unref, or the
// ContextPtr going out of scope), so both sides pay for their reference.
//
// Usage:
//   harness [-threads 1,2] [-reps 7] [-sample-ms 20] [-n N] [-ops a,b] [-impls distautograd,native] [-clock cpu|wall]
//       time the operations; prints a JSON array (one object per op and thread count);
//       each sample is timed by each thread's CPU time (default) or the wall clock
//   harness -mem-live N -impl distautograd|native
//       RSS before and after creating N live contexts; prints a JSON object
//   harness -mem-cycles M [-interval K] -impl distautograd|native [-agent]
//       RSS every K of M new/release cycles; prints a JSON object
//
// Built with -DDAC_BENCH_NATIVE (and -ltorch_cpu) it has the native side;
// without, only distautograd's (the smoke test's build where libtorch is
// missing).
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "distautograd.h"
#include "distautograd.hpp"

#ifdef DAC_BENCH_NATIVE
#include "native_decls.hpp"
#include "native_rpc_decls.hpp"
namespace native = torch::distributed::autograd;
#endif

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "harness: %s\n", what);
  std::exit(2);
}

// ck aborts the run on a failed dac_* call: a benchmark of failing calls
// would measure the wrong thing.
inline void ck(int rc) {
  if (__builtin_expect(rc != DAC_OK, 0)) {
    std::fprintf(stderr, "harness: a dac_* call failed: %s (%s)\n", dac_status_string(rc), dac_last_error());
    std::exit(2);
  }
}

int64_t readClock(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t nowNs() { return readClock(CLOCK_MONOTONIC); }

// The clock samples are timed with (-clock): the calling thread's CPU time
// by default, so that time the thread spends descheduled (on a machine
// shared with other work) is not counted against whichever side was
// running; -clock wall times them with the monotonic clock instead.
clockid_t g_sampleClock = CLOCK_THREAD_CPUTIME_ID;

int64_t sampleNs() { return readClock(g_sampleClock); }

long rssBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) die("cannot read /proc/self/statm");
  long size = 0, resident = 0;
  if (std::fscanf(f, "%ld %ld", &size, &resident) != 2) die("cannot parse /proc/self/statm");
  std::fclose(f);
  return resident * sysconf(_SC_PAGESIZE);
}

// What the optimizer may not throw away: results are added here.
volatile uint64_t g_sink;

enum Impl { kDac, kNative };
const char* const kImplName[] = {"distautograd", "native"};

// One thread's fixtures: the context it holds during a sample (for the ops
// that read one), in the form each side needs.
struct ThreadState {
  int64_t id = -1;
  dac_context* handle = nullptr;         // C ABI rows
  distautograd::ContextPtr cxx;          // C++ API rows, distautograd
#ifdef DAC_BENCH_NATIVE
  native::ContextPtr nat;                // native
#endif
  uint64_t sink = 0;
  int64_t timedNs = 0;  // the rows that time themselves (paused()): the sum of their timed parts
};

using Body = void (*)(ThreadState&, long n);

enum Api { kCABI, kCXX };

struct Op {
  const char* key;          // -ops name and JSON "op"
  const char* label;        // the table's operation column
  Api api;                  // how distautograd is called
  const char* dacCall;      // what one iteration calls, distautograd
  const char* nativeCall;   // what one iteration calls, native
  bool context;             // each thread holds a context (its current one)
  bool agent;               // native side runs with a stand-in RPC agent set
  Body dac;
  Body nat;
};

// ---- distautograd through the C ABI ----

void dacFloorC(ThreadState& t, long n) {
  for (long i = 0; i < n; ++i) t.sink += uint64_t(dac_version_number());
}

void dacFloorGo(ThreadState& t, long n) {
  for (long i = 0; i < n; ++i) {
    int64_t v;
    ck(dac_max_id(&v));
    t.sink += uint64_t(v);
  }
}

// One new+release of a context through the C ABI; returns its id.
inline int64_t dacNewReleaseOne() {
  dac_context* h;
  int64_t id;
  ck(dac_context_new(&h));
  ck(dac_context_id(h, &id));
  ck(dac_context_unref(h));
  ck(dac_context_release(id));
  return id;
}

void dacNewRelease(ThreadState& t, long n) {
  for (long i = 0; i < n; ++i) t.sink += uint64_t(dacNewReleaseOne());
}

// The rows that pause before each iteration: a training step calls the
// container a few times per few milliseconds, from a thread that was
// elsewhere in between, and what a call costs then is not what it costs in a
// loop. Each iteration sleeps kPauseNs, then times itself with the monotonic
// clock (whatever -clock says: the thread's CPU clock is a system call, and
// the first thing after the pause would pay for the pause), so that only the
// calls count.
constexpr long kPauseNs = 2000000;
constexpr long kPausedN = 50;  // iterations per sample: 100 ms of pauses

void sleepPause() {
  timespec ts{0, kPauseNs};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

void dacPausedNewRelease(ThreadState& t, long n) {
  for (long i = 0; i < n; ++i) {
    sleepPause();
    int64_t t0 = nowNs();
    int64_t id = dacNewReleaseOne();
    t.timedNs += nowNs() - t0;
    t.sink += uint64_t(id);
  }
}

void dacRetrieve(ThreadState& t, long n) {
  for (long i = 0; i < n; ++i) {
    dac_context* h;
    ck(dac_context_retrieve(t.id, &h));
    ck(dac_context_unref(h));
  }
}

void dacIsValid(ThreadState& t, long n) {
  for (long i = 0; i < n; ++i) ck(dac_context_is_valid(t.id));
}

void dacCurrent(ThreadState& t, long n) {
  (void)t;
  for (long i = 0; i < n; ++i) {
    dac_context* h;
    ck(dac_context_current(&h));
    ck(dac_context_unref(h));
  }
}

void dacCurrentID(ThreadState& t, long n) {
  for (long i = 0; i < n; ++i) {
    int64_t v;
    ck(dac_current_context_id(&v));
    t.sink += uint64_t(v);
  }
}

void dacMessageID(ThreadState& t, long n) {
  for (long i = 0; i < n; ++i) {
    int64_t v;
    ck(dac_new_autograd_message_id(&v));
    t.sink += uint64_t(v);
  }
}

void dacGetOrCreate(ThreadState& t, long n) {
  for (long i = 0; i < n; ++i) {
    dac_context* h;
    ck(dac_context_get_or_create(t.id, &h));
    ck(dac_context_unref(h));
  }
}

void dacAddWorker(ThreadState& t, long n) {
  for (long i = 0; i < n; ++i) ck(dac_context_add_known_worker_id(t.handle, int32_t(1 + (i & 3))));
}

void dacContextID(ThreadState& t, long n) {
  for (long i = 0; i < n; ++i) {
    int64_t v;
    ck(dac_context_id(t.handle, &v));
    t.sink += uint64_t(v);
  }
}

void dacCxxContextID(ThreadState& t, long n) {
  for (long i = 0; i < n; ++i) t.sink += uint64_t(t.cxx->contextId());
}

// ---- one template for both C++ APIs ----

template <typename C>
C& container();

template <>
distautograd::DistAutogradContainer& container<distautograd::DistAutogradContainer>() {
  static distautograd::DistAutogradContainer& c = distautograd::DistAutogradContainer::getInstance();
  return c;
}

template <typename C>
struct Cxx {
  static void floorC(ThreadState& t, long n) {
    C& c = container<C>();
    for (long i = 0; i < n; ++i) t.sink += uint64_t(c.getWorkerId());
  }
  static void floorGo(ThreadState& t, long n) {
    C& c = container<C>();
    for (long i = 0; i < n; ++i) t.sink += uint64_t(c.getMaxId());
  }
  // One new+release of a context, its pointer dropped first; returns its id.
  static int64_t newReleaseOne(C& c) {
    int64_t id;
    {
      auto ctx = c.newContext();
      id = ctx->contextId();
    }
    c.releaseContext(id);
    return id;
  }
  static void newRelease(ThreadState& t, long n) {
    C& c = container<C>();
    for (long i = 0; i < n; ++i) t.sink += uint64_t(newReleaseOne(c));
  }
  static void pausedNewRelease(ThreadState& t, long n) {
    C& c = container<C>();
    for (long i = 0; i < n; ++i) {
      sleepPause();
      int64_t t0 = nowNs();
      int64_t id = newReleaseOne(c);
      t.timedNs += nowNs() - t0;
      t.sink += uint64_t(id);
    }
  }
  static void retrieve(ThreadState& t, long n) {
    C& c = container<C>();
    for (long i = 0; i < n; ++i) (void)c.retrieveContext(t.id);
  }
  static void isValid(ThreadState& t, long n) {
    C& c = container<C>();
    for (long i = 0; i < n; ++i) c.isValidContext(t.id);
  }
  static void current(ThreadState& t, long n) {
    (void)t;
    C& c = container<C>();
    for (long i = 0; i < n; ++i) (void)c.currentContext();
  }
  static void currentID(ThreadState& t, long n) {
    for (long i = 0; i < n; ++i) t.sink += uint64_t(C::currentContextId());
  }
  static void messageID(ThreadState& t, long n) {
    C& c = container<C>();
    for (long i = 0; i < n; ++i) t.sink += uint64_t(c.newAutogradMessageId());
  }
  static void getOrCreate(ThreadState& t, long n) {
    C& c = container<C>();
    for (long i = 0; i < n; ++i) (void)c.getOrCreateContext(t.id);
  }
};

// The native context of a thread's fixture, for the context-level rows.
#ifdef DAC_BENCH_NATIVE
template <>
native::DistAutogradContainer& container<native::DistAutogradContainer>() {
  static native::DistAutogradContainer& c = native::DistAutogradContainer::getInstance();
  return c;
}

using N = Cxx<native::DistAutogradContainer>;

void natAddWorker(ThreadState& t, long n) {
  for (long i = 0; i < n; ++i) t.nat->addKnownWorkerId(int16_t(1 + (i & 3)));
}

void natContextID(ThreadState& t, long n) {
  for (long i = 0; i < n; ++i) t.sink += uint64_t(t.nat->contextId());
}

// StandInAgent sets torch's current RPC agent to a pointer that is never
// dereferenced, for the length of a native sample. The native release calls
// RpcAgent::getCurrentRpcAgent() first, whatever the context's known
// workers; with no agent that throws a c10::Error (a backtrace is taken) and
// logs, on every release. With a stand-in set, a context with no known
// workers is released without touching the agent: the release as it runs
// inside a job. Only rows whose contexts have no known workers use it.
struct StandInAgent {
  alignas(64) static unsigned char storage[256];
  StandInAgent() {
    using torch::distributed::rpc::RpcAgent;
    RpcAgent::setCurrentRpcAgent(std::shared_ptr<RpcAgent>(reinterpret_cast<RpcAgent*>(storage), [](RpcAgent*) {}));
  }
  ~StandInAgent() { torch::distributed::rpc::RpcAgent::setCurrentRpcAgent(nullptr); }
};
alignas(64) unsigned char StandInAgent::storage[256];
#define NAT(f) (f)
#else
#define NAT(f) (nullptr)
#endif

using D = Cxx<distautograd::DistAutogradContainer>;

const Op kOps[] = {
    {"floor_c", "floor: a call that stays in C (C ABI)", kCABI, "dac_version_number()", "getWorkerId()", false,
     false, dacFloorC, NAT(N::floorC)},
    {"floor_go", "floor: a call that enters Go (C ABI)", kCABI, "dac_max_id()", "getMaxId()", false, false,
     dacFloorGo, NAT(N::floorGo)},
    {"new_release", "new+release of a context (C ABI)", kCABI,
     "dac_context_new, dac_context_id, dac_context_unref, dac_context_release",
     "newContext, contextId, ContextPtr dropped, releaseContext; with a stand-in RPC agent set", false, true,
     dacNewRelease, NAT(N::newRelease)},
    {"new_release_no_agent", "new+release of a context, native without RPC agent (C ABI)", kCABI,
     "dac_context_new, dac_context_id, dac_context_unref, dac_context_release",
     "newContext, contextId, ContextPtr dropped, releaseContext; no RPC agent: each release throws and logs",
     false, false, dacNewRelease, NAT(N::newRelease)},
    {"paused_new_release", "new+release of a context, each after a 2 ms pause (C ABI)", kCABI,
     "dac_context_new, dac_context_id, dac_context_unref, dac_context_release; timed by the monotonic clock",
     "newContext, contextId, ContextPtr dropped, releaseContext; with a stand-in RPC agent set; timed by the "
     "monotonic clock",
     false, true, dacPausedNewRelease, NAT(N::pausedNewRelease)},
    {"retrieve", "retrieve (C ABI)", kCABI, "dac_context_retrieve, dac_context_unref",
     "retrieveContext, ContextPtr dropped", true, false, dacRetrieve, NAT(N::retrieve)},
    {"is_valid", "is-valid (C ABI)", kCABI, "dac_context_is_valid", "isValidContext", true, false, dacIsValid,
     NAT(N::isValid)},
    {"current_context", "current context (C ABI)", kCABI, "dac_context_current, dac_context_unref",
     "currentContext, ContextPtr dropped", true, false, dacCurrent, NAT(N::current)},
    {"current_id", "current id (C ABI)", kCABI, "dac_current_context_id", "currentContextId (static)", true, false,
     dacCurrentID, NAT(N::currentID)},
    {"new_message_id", "new message id (C ABI)", kCABI, "dac_new_autograd_message_id", "newAutogradMessageId",
     false, false, dacMessageID, NAT(N::messageID)},
    {"get_or_create", "get-or-create, existing (C ABI)", kCABI, "dac_context_get_or_create, dac_context_unref",
     "getOrCreateContext, ContextPtr dropped", true, false, dacGetOrCreate, NAT(N::getOrCreate)},
    {"add_known_worker", "add known worker, already known (C ABI)", kCABI, "dac_context_add_known_worker_id",
     "addKnownWorkerId", true, false, dacAddWorker, NAT(natAddWorker)},
    {"context_id", "context id of a context (C ABI)", kCABI, "dac_context_id", "contextId", true, false,
     dacContextID, NAT(natContextID)},
    // Contended: every thread on one context, a backward pass's pattern
    // (each RPC thread retrieves, checks and extends the pass's context).
    {"shared_retrieve", "retrieve, every thread on one context (C ABI)", kCABI,
     "dac_context_retrieve, dac_context_unref", "retrieveContext, ContextPtr dropped", true, false, dacRetrieve,
     NAT(N::retrieve)},
    {"shared_is_valid", "is-valid, every thread on one context (C ABI)", kCABI, "dac_context_is_valid",
     "isValidContext", true, false, dacIsValid, NAT(N::isValid)},
    {"shared_get_or_create", "get-or-create, every thread on one context (C ABI)", kCABI,
     "dac_context_get_or_create, dac_context_unref", "getOrCreateContext, ContextPtr dropped", true, false,
     dacGetOrCreate, NAT(N::getOrCreate)},
    {"shared_add_known_worker", "add known worker, already known, every thread on one context (C ABI)", kCABI,
     "dac_context_add_known_worker_id", "addKnownWorkerId", true, false, dacAddWorker, NAT(natAddWorker)},
    {"cxx_new_release", "new+release of a context (C++ API)", kCXX,
     "distautograd.hpp: newContext, contextId, ContextPtr dropped, releaseContext",
     "newContext, contextId, ContextPtr dropped, releaseContext; with a stand-in RPC agent set", false, true,
     D::newRelease, NAT(N::newRelease)},
    {"cxx_retrieve", "retrieve (C++ API)", kCXX, "distautograd.hpp: retrieveContext, ContextPtr dropped",
     "retrieveContext, ContextPtr dropped", true, false, D::retrieve, NAT(N::retrieve)},
    {"cxx_current_context", "current context (C++ API)", kCXX, "distautograd.hpp: currentContext, ContextPtr dropped",
     "currentContext, ContextPtr dropped", true, false, D::current, NAT(N::current)},
    {"cxx_get_or_create", "get-or-create, existing (C++ API)", kCXX,
     "distautograd.hpp: getOrCreateContext, ContextPtr dropped", "getOrCreateContext, ContextPtr dropped", true,
     false, D::getOrCreate, NAT(N::getOrCreate)},
    {"cxx_context_id", "context id of a context (C++ API)", kCXX, "distautograd.hpp: contextId", "contextId", true,
     false, dacCxxContextID, NAT(natContextID)},
    {"shared_cxx_retrieve", "retrieve, every thread on one context (C++ API)", kCXX,
     "distautograd.hpp: retrieveContext, ContextPtr dropped", "retrieveContext, ContextPtr dropped", true, false,
     D::retrieve, NAT(N::retrieve)},
};

// Rows whose threads all work on one context, made once per sample.
bool shared(const Op& op) { return std::strncmp(op.key, "shared_", 7) == 0; }

// Rows that pause before each iteration and time only their calls.
bool paused(const Op& op) { return std::strncmp(op.key, "paused_", 7) == 0; }

// The one context of a shared sample (its fixture, made on the sampling
// thread; each thread copies it).
ThreadState g_shared;

// ---- fixtures ----

void setUp(const Op& op, Impl impl, ThreadState& t) {
  if (!op.context) return;
  if (impl == kDac) {
    if (op.api == kCABI) {
      ck(dac_context_new(&t.handle));
      ck(dac_context_id(t.handle, &t.id));
    } else {
      t.cxx = distautograd::DistAutogradContainer::getInstance().newContext();
      t.id = t.cxx->contextId();
    }
    return;
  }
#ifdef DAC_BENCH_NATIVE
  t.nat = native::DistAutogradContainer::getInstance().newContext();
  t.id = t.nat->contextId();
#endif
}

void tearDown(const Op& op, Impl impl, ThreadState& t) {
  if (!op.context) return;
  if (impl == kDac) {
    ck(dac_context_release(t.id));
    if (t.handle != nullptr) ck(dac_context_unref(t.handle));
    t.cxx.reset();
    return;
  }
#ifdef DAC_BENCH_NATIVE
  native::DistAutogradContainer::getInstance().releaseContext(t.id);
  t.nat.reset();
#endif
}

// ---- one sample: T threads, each runs n iterations after a barrier ----

struct Sample {
  const Op* op;
  Impl impl;
  long n;
  pthread_barrier_t start;
  std::vector<double> nsPerOp;  // per thread
};

struct ThreadArg {
  Sample* s;
  int index;
};

void* runThread(void* p) {
  ThreadArg* a = static_cast<ThreadArg*>(p);
  Sample& s = *a->s;
  Body body = s.impl == kDac ? s.op->dac : s.op->nat;
  try {
    ThreadState t;
    if (shared(*s.op)) {
      t.id = g_shared.id;
      t.handle = g_shared.handle;
      t.cxx = g_shared.cxx;
#ifdef DAC_BENCH_NATIVE
      t.nat = g_shared.nat;
#endif
    } else {
      setUp(*s.op, s.impl, t);
    }
    body(t, std::min(s.n, paused(*s.op) ? 2L : 64L));  // warm: the thread's first calls (Go binds an M to it)
    t.timedNs = 0;
    pthread_barrier_wait(&s.start);
    int64_t t0 = sampleNs();
    body(t, s.n);
    int64_t t1 = sampleNs();
    s.nsPerOp[size_t(a->index)] = double(paused(*s.op) ? t.timedNs : t1 - t0) / double(s.n);
    if (!shared(*s.op)) tearDown(*s.op, s.impl, t);
    g_sink = g_sink + t.sink;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "harness: %s on %s: %s\n", s.op->key, kImplName[s.impl], e.what());
    std::exit(2);
  }
  return nullptr;
}

// sample returns the mean over the threads of each one's ns per operation.
double sample(const Op& op, Impl impl, int threads, long n) {
#ifdef DAC_BENCH_NATIVE
  std::unique_ptr<StandInAgent> agent;
  if (impl == kNative && op.agent) agent.reset(new StandInAgent());
#endif
  Sample s;
  s.op = &op;
  s.impl = impl;
  s.n = n;
  s.nsPerOp.assign(size_t(threads), 0);
  pthread_barrier_init(&s.start, nullptr, unsigned(threads));
  if (shared(op)) {
    g_shared = ThreadState();
    setUp(op, impl, g_shared);
  }
  std::vector<pthread_t> tids(static_cast<size_t>(threads));
  std::vector<ThreadArg> args(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) {
    args[size_t(i)] = ThreadArg{&s, i};
    int rc = pthread_create(&tids[size_t(i)], nullptr, runThread, &args[size_t(i)]);
    if (rc != 0) die(std::strerror(rc));
  }
  for (pthread_t tid : tids) pthread_join(tid, nullptr);
  pthread_barrier_destroy(&s.start);
  if (shared(op)) {
    tearDown(op, impl, g_shared);
    g_shared = ThreadState();
  }
  double sum = 0;
  for (double v : s.nsPerOp) sum += v;
  return sum / threads;
}

// calibrate returns an iteration count that makes a sample last about
// sampleNs on this side.
long calibrate(const Op& op, Impl impl, int threads, double sampleNs) {
  if (paused(op)) return kPausedN;  // a sample is its pauses, whatever its calls cost
  long n = 16;
  for (;;) {
    double per = sample(op, impl, threads, n);
    double total = per * double(n);
    if (total >= sampleNs / 4 || n >= (1L << 30)) {
      double want = sampleNs / std::max(per, 0.01);
      return std::max(16L, std::min(long(want), 1L << 30));
    }
    n *= 8;
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::string jsonString(const char* s) {
  std::string out = "\"";
  for (const char* p = s; *p; ++p) {
    if (*p == '"' || *p == '\\') out += '\\';
    out += *p;
  }
  return out + "\"";
}

std::string jsonNumbers(const std::vector<double>& v) {
  std::string out = "[";
  char buf[64];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.3f", i ? ", " : "", v[i]);
    out += buf;
  }
  return out + "]";
}

std::vector<std::string> splitList(const char* s) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == 0) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
      if (*p == 0) break;
    } else {
      cur += *p;
    }
  }
  return out;
}

std::vector<int> defaultThreads() {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  std::vector<int> out;
  for (int t = 1; t < cores; t *= 2) out.push_back(t);
  out.push_back(int(std::max(1L, cores)));
  return out;
}

void initBoth(bool withNative) {
  ck(dac_init(0));
#ifdef DAC_BENCH_NATIVE
  if (withNative) native::DistAutogradContainer::init(0);
#else
  (void)withNative;
#endif
}

// ---- memory ----

void newReleaseOnce(Impl impl) {
  if (impl == kDac) {
    dacNewReleaseOne();
    return;
  }
#ifdef DAC_BENCH_NATIVE
  N::newReleaseOne(container<native::DistAutogradContainer>());
#endif
}

int memLive(Impl impl, long n) {
  long before = rssBytes();
  int64_t t0 = nowNs();
  for (long i = 0; i < n; ++i) {
    if (impl == kDac) {
      dac_context* h;
      ck(dac_context_new(&h));
      ck(dac_context_unref(h));
      ck(dac_clear_current_context());
    } else {
#ifdef DAC_BENCH_NATIVE
      auto& c = native::DistAutogradContainer::getInstance();
      (void)c.newContext();
      c.clearCurrentContext();
#endif
    }
  }
  int64_t t1 = nowNs();
  long after = rssBytes();
  std::printf(
      "{\"impl\": \"%s\", \"live_contexts\": %ld, \"rss_before_bytes\": %ld, \"rss_after_bytes\": %ld, "
      "\"bytes_per_context\": %.1f, \"seconds\": %.2f}\n",
      kImplName[impl], n, before, after, double(after - before) / double(n), double(t1 - t0) / 1e9);
  return 0;
}

int memCycles(Impl impl, long cycles, long interval, bool agent) {
#ifdef DAC_BENCH_NATIVE
  std::unique_ptr<StandInAgent> standIn;
  if (impl == kNative && agent) standIn.reset(new StandInAgent());
#else
  (void)agent;
#endif
  std::string points;
  char buf[96];
  int64_t t0 = nowNs();
  long first = 0;
  for (long i = 1; i <= cycles; ++i) {
    newReleaseOnce(impl);
    if (i % interval == 0 || i == cycles) {
      long rss = rssBytes();
      if (first == 0) first = rss;
      std::snprintf(buf, sizeof buf, "%s{\"cycles\": %ld, \"rss_bytes\": %ld}", points.empty() ? "" : ", ", i, rss);
      points += buf;
    }
  }
  int64_t t1 = nowNs();
  std::printf("{\"impl\": \"%s\", \"cycles\": %ld, \"agent\": %s, \"seconds\": %.2f, \"points\": [%s]}\n",
              kImplName[impl], cycles, agent ? "true" : "false", double(t1 - t0) / 1e9, points.c_str());
  return 0;
}

// ---- main ----

struct Args {
  std::vector<int> threads = defaultThreads();
  int reps = 7;
  double sampleMs = 20;
  long fixedN = 0;
  std::vector<std::string> ops;
  bool impl[2] = {true, true};
  long memLive = 0;
  long memCycles = 0;
  long interval = 0;
  bool agent = false;
  int memImpl = -1;
};

Impl parseImpl(const std::string& s) {
  if (s == "distautograd") return kDac;
  if (s == "native") return kNative;
  die(("unknown implementation " + s + " (distautograd or native)").c_str());
}

Args parseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) die((f + " needs a value").c_str());
      return argv[++i];
    };
    if (f == "-threads") {
      a.threads.clear();
      for (const std::string& s : splitList(value())) a.threads.push_back(std::max(1, std::atoi(s.c_str())));
    } else if (f == "-reps") {
      a.reps = std::max(1, std::atoi(value()));
    } else if (f == "-sample-ms") {
      a.sampleMs = std::max(0.1, std::atof(value()));
    } else if (f == "-n") {
      a.fixedN = std::max(1L, std::atol(value()));
    } else if (f == "-ops") {
      a.ops = splitList(value());
    } else if (f == "-impls") {
      a.impl[0] = a.impl[1] = false;
      for (const std::string& s : splitList(value())) a.impl[parseImpl(s)] = true;
    } else if (f == "-impl") {
      a.memImpl = parseImpl(value());
    } else if (f == "-mem-live") {
      a.memLive = std::atol(value());
    } else if (f == "-mem-cycles") {
      a.memCycles = std::atol(value());
    } else if (f == "-interval") {
      a.interval = std::atol(value());
    } else if (f == "-clock") {
      std::string c = value();
      if (c == "cpu") {
        g_sampleClock = CLOCK_THREAD_CPUTIME_ID;
      } else if (c == "wall") {
        g_sampleClock = CLOCK_MONOTONIC;
      } else {
        die(("-clock: " + c + " is neither cpu nor wall").c_str());
      }
    } else if (f == "-agent") {
      a.agent = true;
    } else {
      die(("unknown flag " + f).c_str());
    }
  }
#ifndef DAC_BENCH_NATIVE
  if (a.impl[kNative] && a.memImpl == -1 && a.memLive == 0 && a.memCycles == 0) a.impl[kNative] = false;
  if (a.memImpl == kNative) die("built without the native component (-DDAC_BENCH_NATIVE)");
#endif
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parseArgs(argc, argv);
  if (a.memLive > 0 || a.memCycles > 0) {
    if (a.memImpl < 0) die("-mem-live and -mem-cycles need -impl distautograd|native");
    Impl impl = Impl(a.memImpl);
    // Only the measured side is initialized: the other's memory stays out.
    if (impl == kDac) {
      ck(dac_init(0));
    } else {
#ifdef DAC_BENCH_NATIVE
      native::DistAutogradContainer::init(0);
#endif
    }
    newReleaseOnce(impl);  // first-call costs (thread binding, lazy setup) stay out of the figures
    if (a.memLive > 0) return memLive(impl, a.memLive);
    return memCycles(impl, a.memCycles, a.interval > 0 ? a.interval : std::max(1L, a.memCycles / 10), a.agent);
  }

  initBoth(a.impl[kNative]);
  std::printf("[\n");
  bool first = true;
  for (const Op& op : kOps) {
    if (!a.ops.empty() && std::find(a.ops.begin(), a.ops.end(), op.key) == a.ops.end()) continue;
    for (int threads : a.threads) {
      std::vector<double> samples[2];
      long n[2] = {a.fixedN, a.fixedN};
      for (int impl = 0; impl < 2; ++impl) {
        if (a.impl[impl] && n[impl] == 0) n[impl] = calibrate(op, Impl(impl), threads, a.sampleMs * 1e6);
      }
      for (int r = 0; r < a.reps; ++r) {
        // Alternate, and alternate which side goes first.
        for (int k = 0; k < 2; ++k) {
          int impl = (r + k) % 2;
          if (a.impl[impl]) samples[impl].push_back(sample(op, Impl(impl), threads, n[impl]));
        }
      }
      std::printf("%s  {\"op\": %s, \"label\": %s, \"threads\": %d, \"distautograd_call\": %s, \"native_call\": %s, ",
                  first ? "" : ",\n", jsonString(op.key).c_str(), jsonString(op.label).c_str(), threads,
                  jsonString(op.dacCall).c_str(), jsonString(op.nativeCall).c_str());
      for (int impl = 0; impl < 2; ++impl) {
        const char* name = impl == kDac ? "distautograd" : "native";
        if (samples[impl].empty()) {
          std::printf("\"%s_ns\": null, \"%s_samples\": [], \"%s_n\": 0%s", name, name, name, impl ? "}" : ", ");
        } else {
          std::printf("\"%s_ns\": %.3f, \"%s_samples\": %s, \"%s_n\": %ld%s", name, median(samples[impl]), name,
                      jsonNumbers(samples[impl]).c_str(), name, n[impl], impl ? "}" : ", ");
        }
      }
      first = false;
      std::fflush(stdout);
    }
  }
  std::printf("\n]\n");
  return 0;
}
