// scenario.cpp: the differential scenario. One source, compiled twice: with
// -DDAC_NATIVE against the native component (libtorch_cpu.so, through
// native_decls.hpp), and without it against distautograd.hpp. Both programs
// print one line per step; the test (cpp_diff_test.go) requires the two
// outputs to be identical, line for line.
//
// Usage: scenario main        the operations, their messages, threads
//        scenario init W      the init rules and id layout for worker id W
//                             (a fresh process each: init happens once)
//
// An error prints the first line of what(): the native c10::Error appends
// "Exception raised from ..." and a backtrace after the message.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <string>
#include <thread>
#include <vector>

#ifdef DAC_NATIVE
#include "native_decls.hpp"
namespace dist = torch::distributed::autograd;
#else
#include "distautograd.hpp"
namespace dist = distautograd;
#endif

using dist::ContextPtr;
using dist::DistAutogradContainer;

namespace {

std::string firstLine(const char* what) {
  const char* nl = std::strchr(what, '\n');
  return nl ? std::string(what, nl) : std::string(what);
}

void line(const std::string& label, const std::string& value) { std::printf("%s: %s\n", label.c_str(), value.c_str()); }

std::string str(long long v) { return std::to_string(v); }

// Runs f, printing its result (f returns a string) or the first line of the
// error it throws.
template <typename F>
void step(const std::string& label, F f) {
  try {
    line(label, f());
  } catch (const std::exception& e) {
    line(label, "error: " + firstLine(e.what()));
  }
}

// setCurrentContextId is the one operation whose native check is a
// TORCH_INTERNAL_ASSERT: its what() starts "false INTERNAL ASSERT FAILED at
// <file>:<line>, please report a bug to PyTorch. Already have an autograd
// context id for this thread." where distautograd's is just the message. So
// for it the scenario prints whether what() contains the message, not the
// first line.
void setCurrentStep(const std::string& label, int64_t id) {
  static const char kMsg[] = "Already have an autograd context id for this thread.";
  try {
    DistAutogradContainer::setCurrentContextId(id);
    line(label, "ok");
  } catch (const std::exception& e) {
    line(label, std::string("error containing the message: ") + (std::strstr(e.what(), kMsg) ? "yes" : "no"));
  }
}

std::string workers(const ContextPtr& ctx) {
  std::vector<int> ids;
  for (auto w : ctx->getKnownWorkerIds()) ids.push_back(w);
  std::sort(ids.begin(), ids.end());
  std::string out = "{";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + str(ids[i]);
  return out + "}";
}

std::string ok() { return "ok"; }

int scenarioInit(int64_t w) {
  step("getInstance before init", [] { return str(DistAutogradContainer::getInstance().getWorkerId()); });
  step("init(-1)", [] { return str(DistAutogradContainer::init(-1).getWorkerId()); });
  step("init(65536)", [] { return str(DistAutogradContainer::init(65536).getWorkerId()); });
  step("init(w)", [&] { return str(DistAutogradContainer::init(w).getWorkerId()); });
  auto& c = DistAutogradContainer::getInstance();
  step("getWorkerId", [&] { return str(c.getWorkerId()); });
  step("getMaxId", [&] { return str(c.getMaxId()); });
  step("newAutogradMessageId", [&] { return str(c.newAutogradMessageId()); });
  step("newAutogradMessageId", [&] { return str(c.newAutogradMessageId()); });
  step("newContext", [&] { return str(c.newContext()->contextId()); });
  step("currentContextId", [] { return str(DistAutogradContainer::currentContextId()); });
  step("init(w) again", [&] { return str(DistAutogradContainer::init(w).getWorkerId()); });
  step("init(w + 1) or init(w - 1)", [&] { return str(DistAutogradContainer::init(w < 65535 ? w + 1 : w - 1).getWorkerId()); });
  step("init(-1) after init", [] { return str(DistAutogradContainer::init(-1).getWorkerId()); });
  step("getOrCreateContext(max id)", [&] { return str(c.getOrCreateContext(c.getMaxId())->contextId()); });
  step("numAutogradContexts", [&] { return str(static_cast<long long>(c.numAutogradContexts())); });
  return 0;
}

int scenarioMain() {
  auto& c = DistAutogradContainer::init(3);
  step("getWorkerId", [&] { return str(c.getWorkerId()); });
  step("getMaxId", [&] { return str(c.getMaxId()); });
  step("numAutogradContexts", [&] { return str(static_cast<long long>(c.numAutogradContexts())); });

  // This thread's current context.
  step("hasValidContext", [&] { return str(c.hasValidContext()); });
  step("currentContextId", [] { return str(DistAutogradContainer::currentContextId()); });
  step("currentContext without one", [&] { return str(c.currentContext()->contextId()); });
  ContextPtr ctx = c.newContext();
  const int64_t id = ctx->contextId();
  line("newContext", str(id));
  step("hasValidContext", [&] { return str(c.hasValidContext()); });
  step("currentContextId", [] { return str(DistAutogradContainer::currentContextId()); });
  step("currentContext", [&] { return str(c.currentContext()->contextId()); });
  step("newContext again", [&] { return str(c.newContext()->contextId()); });
  setCurrentStep("setCurrentContextId with one", id + 1);
  step("forceCurrentContextId(id + 1000)", [&] {
    DistAutogradContainer::forceCurrentContextId(id + 1000);
    return str(DistAutogradContainer::currentContextId());
  });
  step("currentContext of a missing id", [&] { return str(c.currentContext()->contextId()); });
  step("clearCurrentContext", [&] {
    c.clearCurrentContext();
    return str(DistAutogradContainer::currentContextId());
  });
  step("hasValidContext", [&] { return str(c.hasValidContext()); });
  step("currentContext after clear", [&] { return str(c.currentContext()->contextId()); });
  setCurrentStep("setCurrentContextId(id)", id);
  step("currentContext", [&] { return str(c.currentContext()->contextId()); });

  // Lookups.
  step("retrieveContext(id)", [&] { return str(c.retrieveContext(id)->contextId()); });
  step("retrieveContext(12345)", [&] { return str(c.retrieveContext(12345)->contextId()); });
  step("isValidContext(id)", [&] { c.isValidContext(id); return ok(); });
  step("isValidContext(12345)", [&] { c.isValidContext(12345); return ok(); });
  step("isValidContext(-1)", [&] { c.isValidContext(-1); return ok(); });
  step("releaseContext(12345)", [&] { c.releaseContext(12345); return ok(); });
  step("releaseContextIfPresent(12345)", [&] { c.releaseContextIfPresent(12345); return ok(); });
  const int64_t remote = (int64_t{5} << 48) + 17;  // a pass started by worker 5
  step("getOrCreateContext(remote)", [&] { return str(c.getOrCreateContext(remote)->contextId()); });
  step("getOrCreateContext(remote) again", [&] { return str(c.getOrCreateContext(remote)->contextId()); });
  step("currentContextId", [] { return str(DistAutogradContainer::currentContextId()); });
  step("numAutogradContexts", [&] { return str(static_cast<long long>(c.numAutogradContexts())); });

  // Message ids (one thread: consecutive in both).
  for (int i = 0; i < 3; ++i) step("newAutogradMessageId", [&] { return str(c.newAutogradMessageId()); });

  // The context's own state.
  step("known workers of a new context", [&] { return workers(ctx); });
  step("addKnownWorkerId 1, 2, 2, -25536", [&] {
    ctx->addKnownWorkerId(1);
    ctx->addKnownWorkerId(2);
    ctx->addKnownWorkerId(2);
    ctx->addKnownWorkerId(-25536);  // worker 40000 as the native int16_t
    return workers(ctx);
  });
  step("sendFunctions", [&] { return str(static_cast<long long>(ctx->sendFunctions().size())); });
  step("recvFunctions", [&] { return str(static_cast<long long>(ctx->recvFunctions().size())); });
  step("retrieveSendFunction(7)", [&] { return str(ctx->retrieveSendFunction(7) ? 1 : 0); });
  step("known workers through retrieveContext", [&] { return workers(c.retrieveContext(id)); });

  // Release: a context still held stays readable; the releasing thread's
  // current id is reset. (Its known workers cannot be told without an RPC
  // agent: both components skip that and carry on.)
  step("releaseContext(id)", [&] { c.releaseContext(id); return ok(); });
  step("held context after release: id", [&] { return str(ctx->contextId()); });
  step("held context after release: workers", [&] { return workers(ctx); });
  step("currentContextId after release", [] { return str(DistAutogradContainer::currentContextId()); });
  step("hasValidContext after release", [&] { return str(c.hasValidContext()); });
  step("retrieveContext(id) after release", [&] { return str(c.retrieveContext(id)->contextId()); });
  step("isValidContext(id) after release", [&] { c.isValidContext(id); return ok(); });
  step("releaseContext(id) again", [&] { c.releaseContext(id); return ok(); });
  step("releaseContextIfPresent(id) again", [&] { c.releaseContextIfPresent(id); return ok(); });
  step("releaseContextIfPresent(remote)", [&] { c.releaseContextIfPresent(remote); return ok(); });
  step("numAutogradContexts", [&] { return str(static_cast<long long>(c.numAutogradContexts())); });

  // Releasing a context that is not the current one leaves the current id.
  ContextPtr mine = c.newContext();
  line("newContext", str(mine->contextId()));
  step("getOrCreateContext(remote) and release it", [&] {
    c.getOrCreateContext(remote);
    c.releaseContext(remote);
    return str(DistAutogradContainer::currentContextId());
  });
  step("releaseContext(mine)", [&] { c.releaseContext(mine->contextId()); return str(DistAutogradContainer::currentContextId()); });

  // Threads: a new std::thread has no current context; a context released
  // by another thread leaves a stale current id behind.
  std::thread([&] {
    step("thread: hasValidContext", [&] { return str(c.hasValidContext()); });
    step("thread: currentContextId", [] { return str(DistAutogradContainer::currentContextId()); });
    step("thread: currentContext", [&] { return str(c.currentContext()->contextId()); });
  }).join();
  std::promise<int64_t> created;
  std::promise<void> released;
  std::thread a([&] {
    const int64_t myId = c.newContext()->contextId();
    created.set_value(myId);
    released.get_future().wait();
    step("thread A after B released: hasValidContext", [&] { return str(c.hasValidContext()); });
    step("thread A after B released: currentContextId is its own", [&] {
      return str(DistAutogradContainer::currentContextId() == myId ? 1 : 0);
    });
    step("thread A after B released: currentContext", [&] { return str(c.currentContext()->contextId()); });
    step("thread A: newContext", [&] { return str(c.newContext()->contextId()); });
  });
  const int64_t aid = created.get_future().get();
  // Its id's value is no part of the contract: natively the counter's
  // next, here the first of the thread's own run (container/ids.go).
  line("thread A created an id of this worker, after the main thread's", str((aid >> 48) == 3 && aid > mine->contextId() ? 1 : 0));
  std::thread b([&] { step("thread B: releaseContext(A's)", [&] { c.releaseContext(aid); return ok(); }); });
  b.join();
  step("main: currentContextId", [] { return str(DistAutogradContainer::currentContextId()); });
  released.set_value();
  a.join();
  step("numAutogradContexts", [&] { return str(static_cast<long long>(c.numAutogradContexts())); });
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc == 2 && std::strcmp(argv[1], "main") == 0) return scenarioMain();
  if (argc == 3 && std::strcmp(argv[1], "init") == 0) return scenarioInit(std::strtoll(argv[2], nullptr, 10));
  std::fprintf(stderr, "usage: %s main | init WORKER_ID\n", argv[0]);
  return 2;
}
