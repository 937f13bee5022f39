// fanout_test.cpp: the tests of distautograd.hpp's release fan-out hooks
// (setCleanupSender, setLogHook, setCleanupOptions, cleanupStats,
// cleanupFlush), run against the built library by cpp_fanout_test.go, one
// process per scenario (the fan-out and its counters are process-wide):
//
//   fanout_test before_init   the hooks work before init(); counters are 0
//   fanout_test main          delivery, failures (false, throws), retries,
//                             the log hook, replacing a sender in flight,
//                             senders calling back, flush, bad arguments
//   fanout_test exit          main returns with a sender set and messages
//                             pending: the process exits cleanly
//
// It prints one line per failed check and "PASS <n> checks" or
// "FAIL <k> of <n> checks", and exits non-zero on any failure.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distautograd.hpp"
#include "check.hpp"

using distautograd::CleanupOptions;
using distautograd::CleanupStats;
using distautograd::ContextPtr;
using distautograd::DistAutogradContainer;
using distautograd::Error;
using distautograd::worker_id_t;

namespace {

std::string show(const std::vector<std::pair<int, int64_t>>& v) {
  std::string out = "[";
  for (const auto& p : v) out += "(" + std::to_string(p.first) + "," + std::to_string(p.second) + ")";
  return out + "]";
}


const std::chrono::seconds kFlush{10};

// A gate that a sender waits on: shut, it holds every attempt back.
class Gate {
 public:
  void shut() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(30), [this] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
};

// What a sender was asked to deliver, and on which thread.
struct Record {
  worker_id_t worker;
  int64_t context;
  std::thread::id thread;
};

struct Recorder {
  std::mutex mu;
  std::vector<Record> calls;

  void add(worker_id_t w, int64_t c) {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back(Record{w, c, std::this_thread::get_id()});
  }
  // The (worker, context) pairs recorded for context c, sorted.
  std::vector<std::pair<int, int64_t>> of(int64_t c) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::pair<int, int64_t>> out;
    for (const Record& r : calls)
      if (r.context == c) out.emplace_back(r.worker, r.context);
    std::sort(out.begin(), out.end());
    return out;
  }
};

CleanupStats minus(const CleanupStats& a, const CleanupStats& b) {
  CleanupStats d;
  d.sent = a.sent - b.sent;
  d.retried = a.retried - b.retried;
  d.failed = a.failed - b.failed;
  d.dropped = a.dropped - b.dropped;
  d.skipped = a.skipped - b.skipped;
  d.pending = a.pending;
  return d;
}

int64_t releaseWithWorkers(DistAutogradContainer& c, std::initializer_list<worker_id_t> workers) {
  ContextPtr ctx = c.newContext();
  for (worker_id_t w : workers) ctx->addKnownWorkerId(w);
  const int64_t id = ctx->contextId();
  c.releaseContext(id);
  return id;
}

// ---- before_init ----

int scenarioBeforeInit() {
  const CleanupStats s = DistAutogradContainer::cleanupStats();
  CHECK_EQ(s.sent + s.retried + s.failed + s.dropped + s.skipped + s.pending, int64_t{0});
  CHECK_EQ(DistAutogradContainer::cleanupFlush(std::chrono::milliseconds(0)), int64_t{0});
  DistAutogradContainer::setCleanupSender([](worker_id_t, int64_t) { return true; });
  DistAutogradContainer::setLogHook([](int, const std::string&) {});
  CleanupOptions o;
  o.maxAttempts = 2;
  DistAutogradContainer::setCleanupOptions(o);
  DistAutogradContainer::setCleanupSender(nullptr);
  DistAutogradContainer::setLogHook(nullptr);
  return finish();
}

// ---- main ----

void testDelivery(DistAutogradContainer& c) {
  Recorder rec;
  DistAutogradContainer::setCleanupSender([&rec](worker_id_t w, int64_t id) {
    rec.add(w, id);
    return true;
  });
  const CleanupStats before = DistAutogradContainer::cleanupStats();
  // 40000 is the native int16_t -25536: the sender gets what addKnownWorkerId got.
  const int64_t id = releaseWithWorkers(c, {4, 5, -25536});
  CHECK_EQ(DistAutogradContainer::cleanupFlush(kFlush), int64_t{0});
  CHECK_EQ(rec.of(id), (std::vector<std::pair<int, int64_t>>{{-25536, id}, {4, id}, {5, id}}));
  {
    std::lock_guard<std::mutex> lock(rec.mu);
    for (const Record& r : rec.calls) CHECK(r.thread != std::this_thread::get_id());
  }
  const CleanupStats d = minus(DistAutogradContainer::cleanupStats(), before);
  CHECK_EQ(d.sent, int64_t{3});
  CHECK_EQ(d.retried + d.failed + d.dropped + d.skipped + d.pending, int64_t{0});
  DistAutogradContainer::setCleanupSender(nullptr);
}

// The workers a host recorded itself, carried by the release: told as the
// context's own known workers are, each once; an absent context releases
// nothing and tells no one.
void testReleaseWithWorkers(DistAutogradContainer& c) {
  Recorder rec;
  DistAutogradContainer::setCleanupSender([&rec](worker_id_t w, int64_t id) {
    rec.add(w, id);
    return true;
  });
  ContextPtr ctx = c.newContext();
  const int64_t id = ctx->contextId();
  ctx->addKnownWorkerId(4);
  CHECK(c.releaseContextWithWorkers(id, {4, 6, -25536}));
  CHECK_EQ(DistAutogradContainer::currentContextId(), int64_t{-1});
  CHECK(!c.releaseContextWithWorkers(id, {7}));
  CHECK_EQ(DistAutogradContainer::cleanupFlush(kFlush), int64_t{0});
  CHECK_EQ(rec.of(id), (std::vector<std::pair<int, int64_t>>{{-25536, id}, {4, id}, {6, id}}));
  const std::unordered_set<worker_id_t> known = ctx->getKnownWorkerIds();
  CHECK_EQ(known.size(), size_t{3});
  CHECK(known.count(4) == 1 && known.count(6) == 1 && known.count(-25536) == 1);
  DistAutogradContainer::setCleanupSender(nullptr);
}

void testReleaseDoesNotWait(DistAutogradContainer& c) {
  Recorder rec;
  Gate gate;
  gate.shut();
  DistAutogradContainer::setCleanupSender([&](worker_id_t w, int64_t id) {
    gate.wait();
    rec.add(w, id);
    return true;
  });
  const int64_t id = releaseWithWorkers(c, {4});  // returns with the sender held back
  CHECK(rec.of(id).empty());
  CHECK_EQ(DistAutogradContainer::cleanupStats().pending, int64_t{1});
  CHECK_EQ(DistAutogradContainer::cleanupFlush(std::chrono::milliseconds(50)), int64_t{1});
  gate.open();
  CHECK_EQ(DistAutogradContainer::cleanupFlush(kFlush), int64_t{0});
  CHECK_EQ(rec.of(id).size(), size_t{1});
  DistAutogradContainer::setCleanupSender(nullptr);
}

void testFailures(DistAutogradContainer& c) {
  CleanupOptions o;
  o.maxAttempts = 3;
  o.initialBackoff = std::chrono::microseconds(1000);
  o.maxBackoff = std::chrono::microseconds(2000);
  DistAutogradContainer::setCleanupOptions(o);
  std::mutex mu;
  std::vector<std::pair<int, std::string>> lines;
  DistAutogradContainer::setLogHook([&](int level, const std::string& msg) {
    std::lock_guard<std::mutex> lock(mu);
    lines.emplace_back(level, msg);
  });
  Recorder rec;
  // Worker 5 refuses (false), 6 throws a std::exception, 7 throws an int:
  // each is a failed attempt, retried up to maxAttempts; 4 is delivered.
  DistAutogradContainer::setCleanupSender([&rec](worker_id_t w, int64_t id) {
    rec.add(w, id);
    if (w == 6) throw std::runtime_error("peer 6 is gone");
    if (w == 7) throw 7;
    return w != 5;
  });
  const CleanupStats before = DistAutogradContainer::cleanupStats();
  const int64_t id = releaseWithWorkers(c, {4, 5, 6, 7});
  CHECK_EQ(DistAutogradContainer::cleanupFlush(kFlush), int64_t{0});
  CHECK_EQ(rec.of(id), (std::vector<std::pair<int, int64_t>>{
                           {4, id}, {5, id}, {5, id}, {5, id}, {6, id}, {6, id}, {6, id}, {7, id}, {7, id}, {7, id}}));
  const CleanupStats d = minus(DistAutogradContainer::cleanupStats(), before);
  CHECK_EQ(d.sent, int64_t{1});
  CHECK_EQ(d.retried, int64_t{6});
  CHECK_EQ(d.failed, int64_t{3});
  CHECK_EQ(d.dropped, int64_t{0});
  int errors = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& l : lines) {
      if (l.first != DAC_LOG_ERROR) continue;
      ++errors;
      CHECK(l.second.rfind("Could not release Dist Autograd Context on node ", 0) == 0);
      CHECK(l.second.find(std::to_string(id)) != std::string::npos);
    }
  }
  CHECK_EQ(errors, 3);

  // A log hook that throws is swallowed: the give-up still counts.
  DistAutogradContainer::setLogHook([](int, const std::string&) { throw std::runtime_error("log"); });
  o.maxAttempts = 1;
  DistAutogradContainer::setCleanupOptions(o);
  const int64_t id2 = releaseWithWorkers(c, {5});
  CHECK_EQ(DistAutogradContainer::cleanupFlush(kFlush), int64_t{0});
  CHECK_EQ(rec.of(id2).size(), size_t{1});
  CHECK_EQ(minus(DistAutogradContainer::cleanupStats(), before).failed, int64_t{4});

  DistAutogradContainer::setCleanupSender(nullptr);
  DistAutogradContainer::setLogHook(nullptr);
  DistAutogradContainer::setCleanupOptions(CleanupOptions{});
}

void testUnset(DistAutogradContainer& c) {
  const CleanupStats before = DistAutogradContainer::cleanupStats();
  DistAutogradContainer::setCleanupSender(nullptr);
  releaseWithWorkers(c, {4, 5});
  const CleanupStats d = minus(DistAutogradContainer::cleanupStats(), before);
  CHECK_EQ(d.skipped, int64_t{2});
  CHECK_EQ(d.sent, int64_t{0});
  // An empty std::function unsets too.
  DistAutogradContainer::setCleanupSender([](worker_id_t, int64_t) { return true; });
  DistAutogradContainer::setCleanupSender(distautograd::CleanupSender());
  releaseWithWorkers(c, {4});
  CHECK_EQ(minus(DistAutogradContainer::cleanupStats(), before).skipped, int64_t{3});
}

void testReplaceInFlight(DistAutogradContainer& c) {
  // The first sender owns state that only it references; it is replaced
  // while one of its calls is blocked. The state must outlive that call.
  Gate gate;
  gate.shut();
  std::atomic<int> entered{0};
  std::atomic<bool> aliveAfterCall{false};
  auto state = std::make_shared<int>(42);
  std::weak_ptr<int> watch = state;
  DistAutogradContainer::setCleanupSender([state, &gate, &entered, &aliveAfterCall](worker_id_t, int64_t) {
    ++entered;
    gate.wait();
    aliveAfterCall = (*state == 42);
    return true;
  });
  state.reset();
  const int64_t first = releaseWithWorkers(c, {4});
  for (int i = 0; i < 10000 && entered.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK_EQ(entered.load(), 1);
  Recorder rec;
  DistAutogradContainer::setCleanupSender([&rec](worker_id_t w, int64_t id) {
    rec.add(w, id);
    return true;
  });
  CHECK(!watch.expired());  // the call in flight holds the old sender
  const int64_t second = releaseWithWorkers(c, {5});
  gate.open();
  CHECK_EQ(DistAutogradContainer::cleanupFlush(kFlush), int64_t{0});
  CHECK(aliveAfterCall.load());
  CHECK(watch.expired());  // dropped once the call returned
  CHECK(rec.of(first).empty());
  CHECK_EQ(rec.of(second).size(), size_t{1});
  DistAutogradContainer::setCleanupSender(nullptr);
}

void testSenderCallsBack(DistAutogradContainer& c) {
  // A loopback "RPC layer": delivering releases the receiver's copy, here
  // another context of this process, which fans out in turn.
  const int64_t a = (int64_t{12} << 48) + 1, b = (int64_t{12} << 48) + 2;
  c.getOrCreateContext(a)->addKnownWorkerId(7);
  Recorder rec;
  DistAutogradContainer::setCleanupSender([&](worker_id_t w, int64_t id) {
    rec.add(w, id);
    if (id == a) {
      DistAutogradContainer& container = DistAutogradContainer::getInstance();
      container.getOrCreateContext(b)->addKnownWorkerId(8);
      container.releaseContextIfPresent(b);
    }
    return true;
  });
  c.releaseContext(a);
  CHECK_EQ(DistAutogradContainer::cleanupFlush(kFlush), int64_t{0});
  CHECK_EQ(rec.of(a).size(), size_t{1});
  CHECK_EQ(rec.of(b), (std::vector<std::pair<int, int64_t>>{{8, b}}));
  CHECK(c.retrieveContextIfPresent(b) == nullptr);
  DistAutogradContainer::setCleanupSender(nullptr);
}

void testArguments() {
  CleanupOptions o;
  o.maxAttempts = -1;
  CHECK_THROWS_STATUS(DistAutogradContainer::setCleanupOptions(o), DAC_ERR_INVALID_ARGUMENT);
  o = CleanupOptions{};
  o.initialBackoff = std::chrono::microseconds(-1);
  CHECK_THROWS_STATUS(DistAutogradContainer::setCleanupOptions(o), DAC_ERR_INVALID_ARGUMENT);
  o = CleanupOptions{};
  o.maxPending = int64_t{1} << 20;  // messages were sent: the queue cannot grow
  CHECK_THROWS_STATUS(DistAutogradContainer::setCleanupOptions(o), DAC_ERR_INVALID_ARGUMENT);
  CHECK_THROWS_STATUS(DistAutogradContainer::cleanupFlush(std::chrono::milliseconds(-1)), DAC_ERR_INVALID_ARGUMENT);
}

int scenarioMain() {
  DistAutogradContainer& c = DistAutogradContainer::init(3);
  testDelivery(c);
  testReleaseWithWorkers(c);
  testReleaseDoesNotWait(c);
  testFailures(c);
  testUnset(c);
  testReplaceInFlight(c);
  testSenderCallsBack(c);
  testArguments();
  CHECK_EQ(c.numAutogradContexts(), size_t{0});
  CHECK_EQ(DistAutogradContainer::cleanupStats().pending, int64_t{0});
  return finish();
}

// ---- exit ----

int scenarioExit() {
  DistAutogradContainer& c = DistAutogradContainer::init(3);
  auto counter = std::make_shared<std::atomic<int>>(0);
  DistAutogradContainer::setCleanupSender([counter](worker_id_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ++*counter;
    return true;
  });
  for (int i = 0; i < 200; ++i) releaseWithWorkers(c, {static_cast<worker_id_t>(i % 50 + 1)});
  CHECK(DistAutogradContainer::cleanupStats().pending > 0);
  return finish();  // static destruction runs with the sender still set and busy
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string s = argc > 1 ? argv[1] : "";
  try {
    if (s == "before_init") return scenarioBeforeInit();
    if (s == "main") return scenarioMain();
    if (s == "exit") return scenarioExit();
  } catch (const std::exception& e) {
    std::printf("uncaught exception: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s before_init | main | exit\n", argv[0]);
  return 2;
}
