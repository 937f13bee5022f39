// api_test.cpp: the tests of distautograd.hpp, run against the built library
// by cpp_api_test.go, one process per scenario (init happens once per
// process):
//
//   api_test before_init   every call before init(); the init rules
//   api_test main          every operation and message, ContextPtr past
//                          release, handles, ContextGuard, std::thread
//   api_test worker 40000  the int16_t worker id of the native API
//   api_test exhausted     counters at max_id (needs the testing build, whose
//                          dactest_set_counter_offsets it finds by dlsym)
//
// It prints one line per failed check and "PASS <n> checks" or
// "FAIL <k> of <n> checks", and exits non-zero on any failure.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distautograd.hpp"
#include "check.hpp"

using distautograd::ContextInfo;
using distautograd::ContextGuard;
using distautograd::ContextPtr;
using distautograd::DistAutogradContainer;
using distautograd::DistAutogradContext;
using distautograd::Error;
using distautograd::worker_id_t;

namespace {

#define CHECK_NOTHROW(stmt)                                                               \
  do {                                                                                    \
    ++g_checks;                                                                           \
    try {                                                                                 \
      stmt;                                                                               \
    } catch (const std::exception& e_) {                                                  \
      failed(__FILE__, __LINE__, #stmt ": threw \"" + std::string(e_.what()) + "\"");    \
    }                                                                                     \
  } while (0)

const char kNotInit[] = "Need to initialize distributed autograd using torch.distributed.autograd.init()";
const char kRange[] = "worker_id needs to be in the range [0, 65535]";
const char kAlreadyHas[] = "Already have an autograd context id for this thread.";
const char kNoCurrent[] =
    "Current thread doesn't have a valid autograd context. Please wrap your code using: `with "
    "torch.distributed.autograd.context() as context_id` to generate a valid context";
const char kCurrentGone[] = "Couldn't find autograd context data for current autograd context id";

std::string notFound(int64_t id) { return "Could not find autograd context with id: " + std::to_string(id); }

// debugValue reads one integer of debugInfo()'s JSON object.
int64_t debugValue(const std::string& key) {
  const std::string json = DistAutogradContainer::getInstance().debugInfo();
  const std::string needle = "\"" + key + "\":";
  const size_t at = json.find(needle);
  if (at == std::string::npos) throw std::runtime_error("debugInfo has no " + key + ": " + json);
  return std::strtoll(json.c_str() + at + needle.size(), nullptr, 10);
}

int64_t liveHandles() { return debugValue("live_handles"); }

std::set<int> workerSet(const ContextPtr& ctx) {
  std::set<int> out;
  for (auto w : ctx->getKnownWorkerIds()) out.insert(w);
  return out;
}

std::string show(const std::set<int>& s) {
  std::string out = "{";
  for (int v : s) out += (out.size() > 1 ? "," : "") + std::to_string(v);
  return out + "}";
}

// ---- before_init ----

int scenarioBeforeInit() {
  CHECK_THROWS(DistAutogradContainer::getInstance(), DAC_ERR_NOT_INITIALIZED, kNotInit);
  CHECK_THROWS(DistAutogradContainer::currentContextId(), DAC_ERR_NOT_INITIALIZED, kNotInit);
  CHECK_THROWS(DistAutogradContainer::setCurrentContextId(1), DAC_ERR_NOT_INITIALIZED, kNotInit);
  CHECK_THROWS(DistAutogradContainer::forceCurrentContextId(1), DAC_ERR_NOT_INITIALIZED, kNotInit);
  CHECK_THROWS(ContextGuard guard, DAC_ERR_NOT_INITIALIZED, kNotInit);
  CHECK_THROWS(DistAutogradContainer::init(-1), DAC_ERR_INVALID_ARGUMENT, kRange);
  CHECK_THROWS(DistAutogradContainer::init(65536), DAC_ERR_INVALID_ARGUMENT, kRange);
  CHECK_THROWS(DistAutogradContainer::init(INT64_MIN), DAC_ERR_INVALID_ARGUMENT, kRange);
  CHECK_THROWS(DistAutogradContainer::getInstance(), DAC_ERR_NOT_INITIALIZED, kNotInit);

  DistAutogradContainer& c = DistAutogradContainer::init(3);
  CHECK_EQ(&c, &DistAutogradContainer::getInstance());
  CHECK_EQ(&c, &DistAutogradContainer::init(3));  // the same id again: a no-op
  CHECK_THROWS(DistAutogradContainer::init(4), DAC_ERR_ALREADY_INITIALIZED,
               "Container is already initialized with worker_id: 3, cannot initialize with different worker_id: 4");
  CHECK_THROWS(DistAutogradContainer::init(65536), DAC_ERR_INVALID_ARGUMENT, kRange);
  CHECK_EQ(c.getWorkerId(), int16_t{3});
  CHECK_EQ(DistAutogradContainer::currentContextId(), int64_t{-1});

  // Error carries the status and its name.
  try {
    DistAutogradContainer::init(4);
  } catch (const std::runtime_error& e) {
    const Error* de = dynamic_cast<const Error*>(&e);
    CHECK(de != nullptr);
    if (de) {
      CHECK_EQ(de->status(), DAC_ERR_ALREADY_INITIALIZED);
      CHECK_EQ(std::string(de->statusName()), std::string("DAC_ERR_ALREADY_INITIALIZED"));
    }
  }
  return finish();
}

// ---- worker 40000 ----

// For a worker id w in [32768, 65535], the native int16_t shows.
int scenarioWorker(int64_t w) {
  if (w < 32768 || w > 65535) {
    std::printf("worker: want an id in [32768, 65535], not %lld\n", static_cast<long long>(w));
    return 2;
  }
  DistAutogradContainer& c = DistAutogradContainer::init(w);
  const int16_t asNative = static_cast<int16_t>(static_cast<uint16_t>(w));
  CHECK_EQ(c.getWorkerId(), asNative);
  const int64_t first = static_cast<int64_t>(static_cast<uint64_t>(w) << 48);
  CHECK_EQ(c.getMaxId(), first | ((int64_t{1} << 48) - 1));
  ContextPtr ctx = c.newContext();
  CHECK_EQ(ctx->contextId(), first);
  CHECK_EQ(c.newAutogradMessageId(), first);
  CHECK_THROWS(DistAutogradContainer::init(w), DAC_ERR_ALREADY_INITIALIZED,
               "Container is already initialized with worker_id: " + std::to_string(asNative) +
                   ", cannot initialize with different worker_id: " + std::to_string(w));
  // Worker ids round-trip through the int16_t of the native API.
  ctx->addKnownWorkerId(asNative);
  ctx->addKnownWorkerId(-2);  // 65534
  ctx->addKnownWorkerId(32767);
  CHECK_EQ(show(workerSet(ctx)), show(std::set<int>{-2, asNative, 32767}));
  int32_t raw[3] = {0, 0, 0};
  size_t n = 0;
  CHECK_EQ(dac_context_known_worker_ids(ctx->handle(), raw, 3, &n), DAC_OK);
  CHECK_EQ(n, size_t{3});
  CHECK_EQ(raw[0], static_cast<int32_t>(w));  // the C ABI sees [0, 65535]
  CHECK_EQ(raw[1], 65534);
  CHECK_EQ(raw[2], 32767);
  // releaseContextsOfWorker takes the native type too.
  c.getOrCreateContext(first + 7);
  CHECK_EQ(c.releaseContextsOfWorker(asNative), int64_t{2});
  CHECK_EQ(c.numAutogradContexts(), size_t{0});
  return finish();
}

// ---- exhausted ----

int scenarioExhausted() {
  using SetOffsets = int (*)(int64_t, int64_t);
  auto set = reinterpret_cast<SetOffsets>(dlsym(RTLD_DEFAULT, "dactest_set_counter_offsets"));
  if (set == nullptr) {
    std::printf("dactest_set_counter_offsets not found: run against the testing build\n");
    return 1;
  }
  const int64_t mask = (int64_t{1} << 48) - 1;
  CHECK_EQ(set(mask - 2, mask - 2), DAC_OK);  // two ids left in each counter
  DistAutogradContainer& c = DistAutogradContainer::init(7);
  const int64_t maxId = c.getMaxId();
  CHECK_EQ(maxId, int64_t{2251799813685247});
  CHECK_EQ(c.newAutogradMessageId(), maxId - 2);
  CHECK_EQ(c.newAutogradMessageId(), maxId - 1);
  CHECK_THROWS_PREFIX(c.newAutogradMessageId(), DAC_ERR_EXHAUSTED, "distautograd: ");
  CHECK_THROWS_PREFIX(c.newAutogradMessageId(), DAC_ERR_EXHAUSTED, "distautograd: ");
  {
    ContextGuard g;
    CHECK_EQ(g.contextId(), maxId - 2);
  }
  ContextPtr last = c.newContext();
  CHECK_EQ(last->contextId(), maxId - 1);
  c.clearCurrentContext();
  CHECK_THROWS_PREFIX(c.newContext(), DAC_ERR_EXHAUSTED, "distautograd: ");
  CHECK_THROWS_PREFIX(ContextGuard g, DAC_ERR_EXHAUSTED, "distautograd: ");
  // A failed newContext changes nothing.
  CHECK_EQ(DistAutogradContainer::currentContextId(), int64_t{-1});
  CHECK_EQ(c.numAutogradContexts(), size_t{1});
  return finish();
}

// ---- main ----

// Records what the cleanup sender was asked to deliver.
struct Sent {
  std::mutex mu;
  std::vector<std::pair<int32_t, int64_t>> messages;
};

int recordCleanup(void* user_data, int32_t worker_id, int64_t context_id) {
  Sent* s = static_cast<Sent*>(user_data);
  std::lock_guard<std::mutex> lock(s->mu);
  s->messages.emplace_back(worker_id, context_id);
  return 0;
}

void testCurrentContext(DistAutogradContainer& c) {
  CHECK(!c.hasValidContext());
  CHECK_EQ(DistAutogradContainer::currentContextId(), int64_t{-1});
  CHECK_THROWS(c.currentContext(), DAC_ERR_NO_CURRENT_CONTEXT, kNoCurrent);

  ContextPtr ctx = c.newContext();
  const int64_t id = ctx->contextId();
  CHECK_EQ(id, int64_t{844424930131968});  // 3 << 48: the first context of worker 3
  CHECK(c.hasValidContext());
  CHECK_EQ(DistAutogradContainer::currentContextId(), id);
  CHECK_EQ(c.currentContext()->contextId(), id);
  CHECK_THROWS(c.newContext(), DAC_ERR_ALREADY_HAS_CONTEXT, kAlreadyHas);
  CHECK_THROWS(DistAutogradContainer::setCurrentContextId(id + 1), DAC_ERR_ALREADY_HAS_CONTEXT, kAlreadyHas);
  CHECK_EQ(DistAutogradContainer::currentContextId(), id);  // a failure changes nothing

  DistAutogradContainer::forceCurrentContextId(id + 1000);
  CHECK_EQ(DistAutogradContainer::currentContextId(), id + 1000);
  CHECK(c.hasValidContext());  // not looked up
  CHECK_THROWS(c.currentContext(), DAC_ERR_NOT_FOUND, kCurrentGone);

  c.clearCurrentContext();
  CHECK(!c.hasValidContext());
  CHECK_EQ(DistAutogradContainer::currentContextId(), int64_t{-1});
  CHECK_THROWS(c.currentContext(), DAC_ERR_NO_CURRENT_CONTEXT, kNoCurrent);
  DistAutogradContainer::setCurrentContextId(id);
  CHECK_EQ(c.currentContext()->contextId(), id);

  // Only the releasing thread's current id is reset, and only if it matches.
  ContextPtr other = c.getOrCreateContext(id + 5);
  c.releaseContext(other->contextId());
  CHECK_EQ(DistAutogradContainer::currentContextId(), id);
  c.releaseContext(id);
  CHECK_EQ(DistAutogradContainer::currentContextId(), int64_t{-1});
  ContextPtr next = c.newContext();
  CHECK_EQ(next->contextId(), id + 1);  // ids are never reused
  c.releaseContext(next->contextId());
}

void testLookups(DistAutogradContainer& c) {
  const size_t before = c.numAutogradContexts();
  CHECK_THROWS(c.retrieveContext(12345), DAC_ERR_NOT_FOUND, notFound(12345));
  CHECK_THROWS(c.isValidContext(12345), DAC_ERR_NOT_FOUND, notFound(12345));
  CHECK_THROWS(c.isValidContext(-1), DAC_ERR_NOT_FOUND, notFound(-1));
  CHECK_THROWS(c.releaseContext(12345), DAC_ERR_NOT_FOUND, notFound(12345));
  CHECK_NOTHROW(c.releaseContextIfPresent(12345));
  CHECK(c.retrieveContextIfPresent(12345) == nullptr);

  const int64_t remote = (int64_t{5} << 48) + 17;
  ContextPtr created = c.getOrCreateContext(remote);
  CHECK_EQ(created->contextId(), remote);
  CHECK_EQ(DistAutogradContainer::currentContextId(), int64_t{-1});  // untouched
  CHECK_EQ(c.numAutogradContexts(), before + 1);
  CHECK_EQ(c.getOrCreateContext(remote)->contextId(), remote);
  CHECK_EQ(c.numAutogradContexts(), before + 1);
  CHECK_NOTHROW(c.isValidContext(remote));
  CHECK_EQ(c.retrieveContext(remote)->contextId(), remote);
  ContextPtr present = c.retrieveContextIfPresent(remote);
  CHECK(present != nullptr);
  if (present) CHECK_EQ(present->contextId(), remote);

  // The same context through two ContextPtrs: one state.
  created->addKnownWorkerId(9);
  CHECK_EQ(show(workerSet(c.retrieveContext(remote))), std::string("{9}"));

  c.releaseContextIfPresent(remote);
  CHECK_EQ(c.numAutogradContexts(), before);
  CHECK(c.retrieveContextIfPresent(remote) == nullptr);
  CHECK_NOTHROW(c.releaseContextIfPresent(remote));  // a cleanup arriving twice
}

void testIds(DistAutogradContainer& c) {
  CHECK_EQ(c.getWorkerId(), int16_t{3});
  CHECK_EQ(c.getMaxId(), int64_t{1125899906842623});
  const int64_t m = c.newAutogradMessageId();
  CHECK_EQ(m >> 48, int64_t{3});
  CHECK_EQ(c.newAutogradMessageId(), m + 1);  // one thread: consecutive
  CHECK_EQ(c.newAutogradMessageId(), m + 2);
}

void testContextState(DistAutogradContainer& c) {
  ContextPtr ctx = c.newContext();
  const int64_t id = ctx->contextId();
  CHECK(ctx->getKnownWorkerIds().empty());
  CHECK(ctx->sendFunctions().empty());
  CHECK(ctx->recvFunctions().empty());

  ctx->addKnownWorkerId(1);
  ctx->addKnownWorkerId(2);
  ctx->addKnownWorkerId(2);
  CHECK_EQ(show(workerSet(ctx)), std::string("{1,2}"));
  for (int16_t w = 10; w < 110; ++w) ctx->addKnownWorkerId(w);  // more than any fixed buffer
  CHECK_EQ(ctx->getKnownWorkerIds().size(), size_t{102});

  const int64_t m1 = c.newAutogradMessageId();
  const int64_t m2 = c.newAutogradMessageId();
  ctx->addSendFunction(0xfeedfacecafebeefULL, m1);
  ctx->addSendFunction(0, m2);  // 0 is a value like any other
  ctx->addRecvFunction(~0ULL, m1);
  CHECK_EQ(ctx->retrieveSendFunction(m1), uint64_t{0xfeedfacecafebeefULL});
  CHECK_EQ(ctx->retrieveSendFunction(m2), uint64_t{0});
  CHECK_EQ(ctx->retrieveRecvFunction(m1), ~uint64_t{0});
  CHECK_THROWS(ctx->retrieveSendFunction(7), DAC_ERR_NOT_FOUND, "Could not find send function for autograd message id: 7");
  CHECK_THROWS(ctx->retrieveRecvFunction(m2), DAC_ERR_NOT_FOUND,
               "Could not find recv function for autograd message id: " + std::to_string(m2));
  CHECK_THROWS_PREFIX(ctx->addSendFunction(1, m1), DAC_ERR_INVALID_ARGUMENT, "distautograd: ");
  CHECK_THROWS_PREFIX(ctx->addRecvFunction(1, m1), DAC_ERR_INVALID_ARGUMENT, "distautograd: ");
  const auto sends = ctx->sendFunctions();
  CHECK_EQ(sends.size(), size_t{2});
  CHECK(sends.count(m1) == 1 && sends.at(m1) == 0xfeedfacecafebeefULL);
  CHECK(sends.count(m2) == 1 && sends.at(m2) == 0);
  const auto recvs = ctx->recvFunctions();
  CHECK_EQ(recvs.size(), size_t{1});
  CHECK(recvs.count(m1) == 1 && recvs.at(m1) == ~0ULL);
  for (int64_t i = 0; i < 300; ++i) ctx->addRecvFunction(static_cast<uint64_t>(i), c.newAutogradMessageId());
  CHECK_EQ(ctx->recvFunctions().size(), size_t{301});

  // A ContextPtr kept past release stays readable, and writable.
  c.releaseContext(id);
  CHECK_THROWS(c.retrieveContext(id), DAC_ERR_NOT_FOUND, notFound(id));
  CHECK_THROWS(c.releaseContext(id), DAC_ERR_NOT_FOUND, notFound(id));
  CHECK_EQ(ctx->contextId(), id);
  CHECK_EQ(ctx->getKnownWorkerIds().size(), size_t{102});
  CHECK_EQ(ctx->retrieveSendFunction(m1), uint64_t{0xfeedfacecafebeefULL});
  CHECK_EQ(ctx->sendFunctions().size(), size_t{2});
  CHECK_NOTHROW(ctx->addKnownWorkerId(200));
  CHECK_EQ(ctx->getKnownWorkerIds().size(), size_t{103});
}

void testHandles(DistAutogradContainer& c) {
  const int64_t base = liveHandles();
  {
    ContextPtr a = c.newContext();
    CHECK_EQ(liveHandles(), base + 1);
    ContextPtr b = a;  // a copy shares the one handle
    CHECK_EQ(liveHandles(), base + 1);
    ContextPtr r = c.retrieveContext(a->contextId());  // a new reference
    CHECK_EQ(liveHandles(), base + 2);
    CHECK(r.get() != a.get());  // not the same object: compare ids
    CHECK_EQ(r->contextId(), a->contextId());
    c.releaseContext(a->contextId());
    CHECK_EQ(liveHandles(), base + 2);  // released, still held
    a.reset();
    CHECK_EQ(liveHandles(), base + 2);
    b.reset();
    CHECK_EQ(liveHandles(), base + 1);
    // The handle is usable from C while its ContextPtr lives.
    int64_t id = 0;
    CHECK_EQ(dac_context_id(r->handle(), &id), DAC_OK);
    CHECK_EQ(id, r->contextId());
  }
  CHECK_EQ(liveHandles(), base);
  // Failing calls leak nothing.
  for (int i = 0; i < 10; ++i) {
    CHECK_THROWS(c.retrieveContext(99), DAC_ERR_NOT_FOUND, notFound(99));
    CHECK_THROWS(c.currentContext(), DAC_ERR_NO_CURRENT_CONTEXT, kNoCurrent);
  }
  CHECK(c.retrieveContextIfPresent(99) == nullptr);
  CHECK_EQ(liveHandles(), base);
}

void testGuard(DistAutogradContainer& c) {
  const size_t n = c.numAutogradContexts();
  const int64_t handles = liveHandles();
  int64_t id = -1;
  ContextPtr kept;
  {
    ContextGuard g;
    id = g.contextId();
    CHECK_EQ(DistAutogradContainer::currentContextId(), id);
    CHECK_EQ(g.context()->contextId(), id);
    CHECK_EQ(c.numAutogradContexts(), n + 1);
    kept = g.context();
    kept->addKnownWorkerId(4);
  }
  CHECK_EQ(c.numAutogradContexts(), n);
  CHECK_EQ(DistAutogradContainer::currentContextId(), int64_t{-1});
  CHECK_THROWS(c.isValidContext(id), DAC_ERR_NOT_FOUND, notFound(id));
  CHECK_EQ(kept->contextId(), id);  // the guard's context outlives it
  CHECK_EQ(show(workerSet(kept)), std::string("{4}"));
  kept.reset();
  CHECK_EQ(liveHandles(), handles);

  // An exception leaving the scope releases too.
  try {
    ContextGuard g;
    id = g.contextId();
    throw std::runtime_error("boom");
  } catch (const std::runtime_error& e) {
    CHECK_EQ(std::string(e.what()), std::string("boom"));
  }
  CHECK_THROWS(c.isValidContext(id), DAC_ERR_NOT_FOUND, notFound(id));
  CHECK_EQ(DistAutogradContainer::currentContextId(), int64_t{-1});
  CHECK_EQ(c.numAutogradContexts(), n);

  // Released inside the scope: the destructor finds nothing and is quiet.
  CHECK_NOTHROW({
    ContextGuard g;
    c.releaseContext(g.contextId());
    CHECK_EQ(DistAutogradContainer::currentContextId(), int64_t{-1});
  });
  CHECK_EQ(c.numAutogradContexts(), n);

  // Nested: the inner guard cannot open a second context on this thread; the
  // outer one is untouched and released at its own exit.
  {
    ContextGuard outer;
    CHECK_THROWS(ContextGuard inner, DAC_ERR_ALREADY_HAS_CONTEXT, kAlreadyHas);
    CHECK_NOTHROW(c.isValidContext(outer.contextId()));
    CHECK_EQ(DistAutogradContainer::currentContextId(), outer.contextId());
    id = outer.contextId();
  }
  CHECK_THROWS(c.isValidContext(id), DAC_ERR_NOT_FOUND, notFound(id));

  // The current id was moved away inside the scope: the guard still releases
  // its own context, by id, and leaves the other current id alone.
  {
    ContextGuard g;
    id = g.contextId();
    DistAutogradContainer::forceCurrentContextId(777);
  }
  CHECK_THROWS(c.isValidContext(id), DAC_ERR_NOT_FOUND, notFound(id));
  CHECK_EQ(DistAutogradContainer::currentContextId(), int64_t{777});
  c.clearCurrentContext();

  // Sequential guards on one thread, as a training loop does.
  for (int i = 0; i < 100; ++i) {
    ContextGuard g;
    g.context()->addKnownWorkerId(static_cast<int16_t>(i));
  }
  CHECK_EQ(c.numAutogradContexts(), n);
  CHECK_EQ(liveHandles(), handles);
}

void testThreads(DistAutogradContainer& c) {
  // A new std::thread has no current context.
  const int64_t mine = c.newContext()->contextId();
  std::thread([&] {
    CHECK(!c.hasValidContext());
    CHECK_EQ(DistAutogradContainer::currentContextId(), int64_t{-1});
    CHECK_THROWS(c.currentContext(), DAC_ERR_NO_CURRENT_CONTEXT, kNoCurrent);
    CHECK_EQ(c.retrieveContext(mine)->contextId(), mine);  // contexts are shared
  }).join();
  CHECK_EQ(DistAutogradContainer::currentContextId(), mine);
  c.releaseContext(mine);

  // Thread B releases thread A's context: A keeps a stale current id.
  std::promise<int64_t> created;
  std::promise<void> released;
  std::thread a([&] {
    const int64_t id = c.newContext()->contextId();
    created.set_value(id);
    released.get_future().wait();
    CHECK(c.hasValidContext());
    CHECK_EQ(DistAutogradContainer::currentContextId(), id);
    CHECK_THROWS(c.currentContext(), DAC_ERR_NOT_FOUND, kCurrentGone);
    CHECK_THROWS(c.newContext(), DAC_ERR_ALREADY_HAS_CONTEXT, kAlreadyHas);
    c.clearCurrentContext();
    CHECK_NOTHROW(c.newContext());
    c.releaseContext(DistAutogradContainer::currentContextId());
  });
  const int64_t aid = created.get_future().get();
  std::thread([&] {
    c.releaseContext(aid);
    CHECK_EQ(DistAutogradContainer::currentContextId(), int64_t{-1});
  }).join();
  released.set_value();
  a.join();

  // A guard whose context another thread released leaves no stale current
  // id behind at scope exit, so the thread's next guard works.
  std::promise<int64_t> guarded;
  std::promise<void> releasedGuarded;
  std::thread g([&] {
    {
      ContextGuard guard;
      guarded.set_value(guard.contextId());
      releasedGuarded.get_future().wait();
      CHECK_EQ(DistAutogradContainer::currentContextId(), guard.contextId());  // stale inside the scope
    }
    CHECK_EQ(DistAutogradContainer::currentContextId(), int64_t{-1});
    CHECK_NOTHROW(ContextGuard next);
  });
  c.releaseContext(guarded.get_future().get());
  releasedGuarded.set_value();
  g.join();

  // Many threads at once: guards, message ids and getOrCreateContext on one
  // shared id; every id unique, nothing left behind.
  const size_t n = c.numAutogradContexts();
  const int64_t handles = liveHandles();
  const int kThreads = 8, kRounds = 200;
  const int64_t shared = (int64_t{6} << 48) + 1;
  std::vector<std::vector<int64_t>> ctxIds(kThreads), msgIds(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        ContextGuard g;
        ctxIds[t].push_back(g.contextId());
        msgIds[t].push_back(c.newAutogradMessageId());
        g.context()->addKnownWorkerId(static_cast<int16_t>(t));
        g.context()->addSendFunction(static_cast<uint64_t>(i), msgIds[t].back());
        if (c.getOrCreateContext(shared)->contextId() != shared) failed(__FILE__, __LINE__, "getOrCreateContext(shared)");
        if (DistAutogradContainer::currentContextId() != g.contextId()) failed(__FILE__, __LINE__, "current id of another thread");
      }
      if (DistAutogradContainer::currentContextId() != -1) failed(__FILE__, __LINE__, "guard left a current id");
    });
  }
  for (auto& th : threads) th.join();
  std::set<int64_t> allCtx, allMsg;
  for (int t = 0; t < kThreads; ++t) {
    allCtx.insert(ctxIds[t].begin(), ctxIds[t].end());
    allMsg.insert(msgIds[t].begin(), msgIds[t].end());
    for (size_t i = 1; i < msgIds[t].size(); ++i) {
      if (msgIds[t][i] <= msgIds[t][i - 1]) failed(__FILE__, __LINE__, "a thread's message ids must increase");
    }
  }
  CHECK_EQ(allCtx.size(), size_t{kThreads * kRounds});
  CHECK_EQ(allMsg.size(), size_t{kThreads * kRounds});
  CHECK_EQ(*allCtx.begin() >> 48, int64_t{3});
  CHECK_EQ(c.numAutogradContexts(), n + 1);  // the shared one
  c.releaseContext(shared);
  CHECK_EQ(c.numAutogradContexts(), n);
  CHECK_EQ(liveHandles(), handles);
}

void testFanOut(DistAutogradContainer& c) {
  // Releasing through the C++ API tells the known workers, as the C ABI
  // documents; a worker id given as the native int16_t reaches the sender in
  // [0, 65535].
  Sent sent;
  CHECK_EQ(dac_set_cleanup_sender(recordCleanup, &sent), DAC_OK);
  ContextPtr ctx = c.newContext();
  const int64_t id = ctx->contextId();
  ctx->addKnownWorkerId(4);
  ctx->addKnownWorkerId(-25536);
  c.releaseContext(id);
  {
    ContextGuard g;  // a guard's release fans out too
    g.context()->addKnownWorkerId(5);
  }
  int64_t pending = -1;
  CHECK_EQ(dac_cleanup_flush(10000, &pending), DAC_OK);
  CHECK_EQ(pending, int64_t{0});
  CHECK_EQ(dac_set_cleanup_sender(nullptr, nullptr), DAC_OK);
  std::lock_guard<std::mutex> lock(sent.mu);
  std::sort(sent.messages.begin(), sent.messages.end());
  CHECK_EQ(sent.messages.size(), size_t{3});
  if (sent.messages.size() == 3) {
    CHECK_EQ(sent.messages[0].first, 4);
    CHECK_EQ(sent.messages[0].second, id);
    CHECK_EQ(sent.messages[1].first, 5);
    CHECK_EQ(sent.messages[2].first, 40000);
    CHECK_EQ(sent.messages[2].second, id);
  }
}

void testExtensions(DistAutogradContainer& c) {
  const std::string info = c.debugInfo();
  CHECK(info.size() > 2 && info.front() == '{' && info.back() == '}');
  CHECK_EQ(debugValue("num_autograd_contexts"), static_cast<int64_t>(c.numAutogradContexts()));
  CHECK_EQ(debugValue("num_current_backward_passes"), int64_t{0});

  const size_t n = c.numAutogradContexts();
  c.setMaxContexts(static_cast<int64_t>(n) + 1);
  ContextPtr one = c.getOrCreateContext((int64_t{8} << 48) + 1);
  CHECK_THROWS_PREFIX(c.getOrCreateContext((int64_t{8} << 48) + 2), DAC_ERR_LIMIT, "distautograd: ");
  CHECK_THROWS_PREFIX(ContextGuard g, DAC_ERR_LIMIT, "distautograd: ");
  CHECK_EQ(DistAutogradContainer::currentContextId(), int64_t{-1});
  c.setMaxContexts(0);
  c.getOrCreateContext((int64_t{8} << 48) + 2);
  CHECK_EQ(c.releaseContextsOfWorker(8), int64_t{2});
  CHECK_EQ(c.numAutogradContexts(), n);
  CHECK_THROWS_PREFIX(c.setMaxContexts(-1), DAC_ERR_INVALID_ARGUMENT, "distautograd: ");

  c.getOrCreateContext((int64_t{9} << 48) + 1);
  CHECK_EQ(c.reapIdleContexts(3600 * 1000), int64_t{0});  // nothing idle for an hour
  CHECK_EQ(c.releaseContextsOfWorker(9), int64_t{1});

  // contexts(): what the container holds, sorted by id, known workers sorted.
  const size_t before = c.contexts().size();
  CHECK_EQ(before, c.numAutogradContexts());
  ContextPtr b = c.getOrCreateContext((int64_t{9} << 48) + 7);
  ContextPtr a = c.getOrCreateContext((int64_t{9} << 48) + 3);
  b->addKnownWorkerId(static_cast<worker_id_t>(40000));
  b->addKnownWorkerId(2);
  for (int w = 100; w < 140; ++w)  // more than one buffer's worth
    a->addKnownWorkerId(static_cast<worker_id_t>(w));
  std::vector<ContextInfo> listed = c.contexts();
  CHECK_EQ(listed.size(), before + 2);
  std::vector<ContextInfo> ours;
  for (const ContextInfo& info : listed)
    if (info.originWorker == 9)
      ours.push_back(info);
  CHECK_EQ(ours.size(), size_t{2});
  CHECK_EQ(ours[0].id, (int64_t{9} << 48) + 3);
  CHECK_EQ(ours[1].id, (int64_t{9} << 48) + 7);
  CHECK_EQ(ours[0].knownWorkers.size(), size_t{40});
  CHECK_EQ(ours[0].knownWorkers.front(), worker_id_t{100});
  CHECK_EQ(ours[1].knownWorkers.size(), size_t{2});
  CHECK_EQ(ours[1].knownWorkers[0], worker_id_t{2});
  CHECK_EQ(ours[1].knownWorkers[1], static_cast<worker_id_t>(40000));  // sorted as worker ids, not as int16_t
  CHECK(ours[1].ageMs >= ours[1].idleMs && ours[1].idleMs >= 0);
  CHECK_EQ(c.releaseContextsOfWorker(9), int64_t{2});
  CHECK_EQ(c.contexts().size(), before);
}

// Every ContextPtr's block comes from its thread's free list and goes back
// to the freeing thread's: blocks made on one thread and dropped on others,
// threads that end with blocks listed (their lists go back to the heap:
// the sanitized run's LeakSanitizer checks it), a thread that ends while
// it still holds a ContextPtr, reuse within a thread. Each object still
// holds its own reference, and every reference is dropped once.
void testBlocks(DistAutogradContainer& c) {
  const int64_t base = liveHandles();
  ContextPtr keep = c.newContext();
  const int64_t id = keep->contextId();
  c.clearCurrentContext();
  std::vector<ContextPtr> made;
  std::thread([&] {
    for (int i = 0; i < 100; ++i) made.push_back(c.retrieveContext(id));
  }).join();
  CHECK_EQ(liveHandles(), base + 101);
  std::vector<std::thread> droppers;
  for (int t = 0; t < 4; ++t) {
    droppers.emplace_back([&, t] {
      for (int i = t; i < 100; i += 4) made[i].reset();
      ContextPtr mine = c.retrieveContext(id);  // from this thread's list
      CHECK_EQ(mine->contextId(), id);
    });
  }
  for (auto& th : droppers) th.join();
  CHECK_EQ(liveHandles(), base + 1);
  ContextPtr held;
  std::thread([&] { held = c.retrieveContext(id); }).join();  // outlives its thread
  CHECK_EQ(held->contextId(), id);
  const void* first = nullptr;
  for (int i = 0; i < 3; ++i) {  // one thread's drop and retrieve reuse a block
    ContextPtr r = c.retrieveContext(id);
    CHECK_EQ(r->contextId(), id);
    if (first == nullptr) first = r.get();
    else CHECK(r.get() == first);
  }
  held.reset();
  keep.reset();
  CHECK_EQ(liveHandles(), base);
  c.releaseContext(id);
}

// contextId() is kept in the object once known: every way to a ContextPtr
// gives its handle's id, a ContextPtr whose maker did not know the id
// (currentContext) reads it once, threads that read it at once all get it,
// and it stays after the release.
void testContextIdKept(DistAutogradContainer& c) {
  auto viaHandle = [](const ContextPtr& p) {
    int64_t id = -1;
    CHECK_EQ(dac_context_id(p->handle(), &id), DAC_OK);
    return id;
  };
  ContextPtr made = c.newContext();
  const int64_t id = viaHandle(made);
  const int64_t other = (int64_t{5} << 48) | 77;  // another worker's id
  std::vector<ContextPtr> all = {made, c.retrieveContext(id), c.retrieveContextIfPresent(id),
                                 c.getOrCreateContext(id), c.getOrCreateContext(other),
                                 c.getOrCreateContext(other), c.currentContext()};
  for (size_t i = 0; i < all.size(); ++i) {
    CHECK_EQ(all[i]->contextId(), viaHandle(all[i]));
    CHECK_EQ(all[i]->contextId(), i < 4 || i == 6 ? id : other);
  }
  for (int round = 0; round < 50; ++round) {
    ContextPtr cur = c.currentContext();  // not yet read: the threads race to
    std::atomic<int> ready{0};
    std::vector<int64_t> seen(8, -1);
    std::vector<std::thread> ts;
    for (size_t t = 0; t < seen.size(); ++t) {
      ts.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < static_cast<int>(seen.size())) {
          std::this_thread::yield();  // a loaded machine may run fewer threads than these
        }
        seen[t] = cur->contextId();
      });
    }
    for (auto& t : ts) t.join();
    for (int64_t v : seen) CHECK_EQ(v, id);
  }
  c.releaseContext(id);
  c.releaseContext(other);
  for (const ContextPtr& p : all) CHECK_EQ(p->contextId(), viaHandle(p));  // released, still held
  CHECK_EQ(all[6]->contextId(), id);
}

int scenarioMain() {
  DistAutogradContainer& c = DistAutogradContainer::init(3);
  testCurrentContext(c);
  testLookups(c);
  testIds(c);
  testContextState(c);
  testHandles(c);
  testContextIdKept(c);
  testBlocks(c);
  testGuard(c);
  testThreads(c);
  testFanOut(c);
  testExtensions(c);
  CHECK_EQ(c.numAutogradContexts(), size_t{0});
  return finish();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string s = argc > 1 ? argv[1] : "";
  try {
    if (s == "before_init" && argc == 2) return scenarioBeforeInit();
    if (s == "main" && argc == 2) return scenarioMain();
    if (s == "worker" && argc == 3) return scenarioWorker(std::strtoll(argv[2], nullptr, 10));
    if (s == "exhausted" && argc == 2) return scenarioExhausted();
  } catch (const std::exception& e) {
    std::printf("uncaught exception: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s before_init | main | worker ID | exhausted\n", argv[0]);
  return 2;
}
