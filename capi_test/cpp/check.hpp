// check.hpp: the check counters and macros that the C++ test programs of
// capi_test/cpp share. Each program counts its checks, prints one line per
// failed check, and ends with finish(): "PASS <n> checks" (returns 0) or
// "FAIL <k> of <n> checks" (returns 1). Include it after distautograd.hpp,
// once per program (its definitions are the program's own).
#ifndef CAPI_TEST_CPP_CHECK_HPP
#define CAPI_TEST_CPP_CHECK_HPP

#include <atomic>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <string>

namespace {

std::atomic<int> g_checks{0};
std::atomic<int> g_failures{0};
std::mutex g_print;

void failed(const char* file, int line, const std::string& what) {
  ++g_failures;
  std::lock_guard<std::mutex> lock(g_print);
  std::printf("%s:%d: %s\n", file, line, what.c_str());
}

// show prints a value for a failed CHECK_EQ; a program adds overloads for
// the types operator<< does not print.
template <typename T>
std::string show(const T& v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

int finish() {
  if (g_failures.load() == 0) {
    std::printf("PASS %d checks\n", g_checks.load());
    return 0;
  }
  std::printf("FAIL %d of %d checks\n", g_failures.load(), g_checks.load());
  return 1;
}

}  // namespace

#define CHECK(cond)                                              \
  do {                                                           \
    ++g_checks;                                                  \
    if (!(cond)) failed(__FILE__, __LINE__, "CHECK(" #cond ")"); \
  } while (0)

#define CHECK_EQ(a, b)                                                                              \
  do {                                                                                              \
    ++g_checks;                                                                                     \
    const auto& va_ = (a);                                                                          \
    const auto& vb_ = (b);                                                                          \
    if (!(va_ == vb_)) failed(__FILE__, __LINE__, #a " == " #b ": " + show(va_) + " != " + show(vb_)); \
  } while (0)

// The throw checks run stmt and require a distautograd::Error with
// wantStatus whose what() matches: CHECK_THROWS exactly wantMsg (the native
// messages), CHECK_THROWS_PREFIX starting with wantPrefix (distautograd's own,
// with details after a stable prefix), CHECK_THROWS_STATUS anything.
enum class WhatMatch { kExact, kPrefix, kAny };

inline bool whatMatches(WhatMatch how, const std::string& what, const std::string& want) {
  switch (how) {
    case WhatMatch::kExact: return what == want;
    case WhatMatch::kPrefix: return what.rfind(want, 0) == 0;
    case WhatMatch::kAny: return true;
  }
  return false;
}

#define CHECK_THROWS_MATCHING(stmt, wantStatus, how, want)                                             \
  do {                                                                                                 \
    ++g_checks;                                                                                        \
    try {                                                                                              \
      stmt;                                                                                            \
      failed(__FILE__, __LINE__, #stmt ": did not throw");                                            \
    } catch (const distautograd::Error& e_) {                                                         \
      if (e_.status() != (wantStatus) || !whatMatches((how), e_.what(), (want)))                      \
        failed(__FILE__, __LINE__,                                                                     \
               #stmt ": threw " + std::string(e_.statusName()) + " \"" + e_.what() + "\", want " +     \
                   dac_status_string(wantStatus) + " \"" + std::string(want) + "\"");                  \
    } catch (const std::exception& e_) {                                                               \
      failed(__FILE__, __LINE__, #stmt ": threw a foreign exception: " + std::string(e_.what()));     \
    }                                                                                                  \
  } while (0)

#define CHECK_THROWS(stmt, wantStatus, wantMsg) CHECK_THROWS_MATCHING(stmt, wantStatus, WhatMatch::kExact, wantMsg)
#define CHECK_THROWS_PREFIX(stmt, wantStatus, wantPrefix) \
  CHECK_THROWS_MATCHING(stmt, wantStatus, WhatMatch::kPrefix, wantPrefix)
#define CHECK_THROWS_STATUS(stmt, wantStatus) CHECK_THROWS_MATCHING(stmt, wantStatus, WhatMatch::kAny, "")

#endif
