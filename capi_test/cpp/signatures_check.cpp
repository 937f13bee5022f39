// signatures_check.cpp: a compile-time check that distautograd.hpp declares
// the native member functions with the native signatures, so that a program
// written against torch::distributed::autograd compiles against it by
// changing the include and the namespace. It is only compiled
// (-fsyntax-only), never linked: it needs no libtorch.
//
// Each signature is written once, generic over the three class types; both
// the native declarations (native_decls.hpp, restated from PyTorch 1.13) and
// distautograd.hpp must match it. The send/recv function accessors are left
// out on purpose: distautograd's functions are opaque uint64_t values.
#include <type_traits>

#include "distautograd.hpp"
#include "native_decls.hpp"

template <typename Container, typename Context, typename Ptr, typename Worker>
struct Native {
  // DistAutogradContainer
  using init = Container& (*)(int64_t);
  using getInstance = Container& (*)();
  using newContext = const Ptr (Container::*)();
  using releaseContext = void (Container::*)(int64_t);
  using releaseContextIfPresent = void (Container::*)(int64_t);
  using isValidContext = void (Container::*)(int64_t);
  using retrieveContext = Ptr (Container::*)(int64_t);
  using currentContext = Ptr (Container::*)();
  using hasValidContext = bool (Container::*)() const;
  using newAutogradMessageId = int64_t (Container::*)();
  using getOrCreateContext = Ptr (Container::*)(int64_t);
  using getMaxId = int64_t (Container::*)();
  using getWorkerId = Worker (Container::*)() const;
  using setCurrentContextId = void (*)(int64_t);
  using forceCurrentContextId = void (*)(int64_t);
  using clearCurrentContext = void (Container::*)();
  using numAutogradContexts = size_t (Container::*)() const;
  using currentContextId = int64_t (*)();
  // DistAutogradContext
  using contextId = int64_t (Context::*)() const;
  using addKnownWorkerId = void (Context::*)(Worker);
  using getKnownWorkerIds = std::unordered_set<Worker> (Context::*)() const;
};

namespace nat = torch::distributed::autograd;
namespace dac = distautograd;

using N = Native<nat::DistAutogradContainer, nat::DistAutogradContext, nat::ContextPtr, int16_t>;
using D = Native<dac::DistAutogradContainer, dac::DistAutogradContext, dac::ContextPtr, int16_t>;

#define SAME(Class, fn)                                                                              \
  static_assert(std::is_same<decltype(&nat::Class::fn), N::fn>::value, "native_decls.hpp: " #fn); \
  static_assert(std::is_same<decltype(&dac::Class::fn), D::fn>::value, "distautograd.hpp: " #fn " differs from the native signature")

SAME(DistAutogradContainer, init);
SAME(DistAutogradContainer, getInstance);
SAME(DistAutogradContainer, newContext);
SAME(DistAutogradContainer, releaseContext);
SAME(DistAutogradContainer, releaseContextIfPresent);
SAME(DistAutogradContainer, isValidContext);
SAME(DistAutogradContainer, retrieveContext);
SAME(DistAutogradContainer, currentContext);
SAME(DistAutogradContainer, hasValidContext);
SAME(DistAutogradContainer, newAutogradMessageId);
SAME(DistAutogradContainer, getOrCreateContext);
SAME(DistAutogradContainer, getMaxId);
SAME(DistAutogradContainer, getWorkerId);
SAME(DistAutogradContainer, setCurrentContextId);
SAME(DistAutogradContainer, forceCurrentContextId);
SAME(DistAutogradContainer, clearCurrentContext);
SAME(DistAutogradContainer, numAutogradContexts);
SAME(DistAutogradContainer, currentContextId);
SAME(DistAutogradContext, contextId);
SAME(DistAutogradContext, addKnownWorkerId);
SAME(DistAutogradContext, getKnownWorkerIds);

// The shapes the issue names, spelled out.
static_assert(std::is_same<dac::ContextPtr, std::shared_ptr<dac::DistAutogradContext>>::value, "ContextPtr");
static_assert(std::is_base_of<std::runtime_error, dac::Error>::value, "Error derives from std::runtime_error");
static_assert(std::is_same<decltype(&dac::DistAutogradContainer::retrieveContextIfPresent), D::retrieveContext>::value,
              "retrieveContextIfPresent: as retrieveContext");
static_assert(std::is_same<decltype(std::declval<dac::DistAutogradContext&>().retrieveSendFunction(0)), uint64_t>::value,
              "functions are opaque uint64_t");
static_assert(std::is_same<decltype(std::declval<dac::DistAutogradContext&>().sendFunctions()),
                           std::unordered_map<int64_t, uint64_t>>::value,
              "sendFunctions");
static_assert(!std::is_copy_constructible<dac::ContextGuard>::value && !std::is_move_constructible<dac::ContextGuard>::value,
              "a ContextGuard is bound to its scope");
static_assert(std::is_nothrow_destructible<dac::ContextGuard>::value, "~ContextGuard never throws");
