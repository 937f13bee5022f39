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
//
// One translation unit: harness_ops.inc (the operations and their table) and
// harness_memory.inc (the memory modes) are parts of this file, included below.
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

#include "harness_ops.inc"

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

#include "harness_memory.inc"

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
