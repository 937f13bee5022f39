// native_decls.hpp: the declarations of the PyTorch 1.13 native
// DistAutogradContainer and DistAutogradContext member functions that the
// differential scenario calls. Debian's libtorch-dev ships libtorch_cpu.so,
// which exports these symbols, but no header for the classes, so this file
// restates them from torch/csrc/distributed/autograd/context/{container,context}.h
// of 1.13. The linker checks names and parameter types (both are in the
// mangled symbol, see `nm -DC libtorch_cpu.so | grep DistAutograd`); return
// types and static-ness are as in those headers (the disassembly agrees:
// setCurrentContextId, forceCurrentContextId and currentContextId take no
// `this`). Only references and shared pointers to these classes are ever
// used, never their layout, so the data members are left out.
#ifndef DAC_TEST_NATIVE_DECLS_HPP
#define DAC_TEST_NATIVE_DECLS_HPP

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <unordered_set>

namespace torch {
namespace distributed {
namespace rpc {
using worker_id_t = int16_t;
}  // namespace rpc
namespace autograd {

class SendRpcBackward;
class RecvRpcBackward;

class DistAutogradContext {
 public:
  int64_t contextId() const;
  void addKnownWorkerId(const rpc::worker_id_t workerId);
  std::unordered_set<rpc::worker_id_t> getKnownWorkerIds() const;
  std::shared_ptr<SendRpcBackward> retrieveSendFunction(int64_t autograd_message_id);
  std::unordered_map<int64_t, std::shared_ptr<SendRpcBackward>> sendFunctions() const;
  std::unordered_map<int64_t, std::shared_ptr<RecvRpcBackward>> recvFunctions() const;

  DistAutogradContext(const DistAutogradContext&) = delete;
  DistAutogradContext& operator=(const DistAutogradContext&) = delete;

 private:
  ~DistAutogradContext() = default;  // never destroyed here: the library's shared_ptr deletes
};

using ContextPtr = std::shared_ptr<DistAutogradContext>;

class DistAutogradContainer {
 public:
  static DistAutogradContainer& init(int64_t worker_id);
  static DistAutogradContainer& getInstance();
  const ContextPtr newContext();
  void releaseContext(int64_t context_id);
  void releaseContextIfPresent(int64_t context_id);
  void isValidContext(int64_t context_id);
  ContextPtr retrieveContext(int64_t context_id);
  ContextPtr currentContext();
  bool hasValidContext() const;
  int64_t newAutogradMessageId();
  ContextPtr getOrCreateContext(int64_t context_id);
  int64_t getMaxId();
  rpc::worker_id_t getWorkerId() const;
  static void setCurrentContextId(int64_t contextId);
  static void forceCurrentContextId(int64_t contextId);
  void clearCurrentContext();
  size_t numAutogradContexts() const;
  static int64_t currentContextId();

  DistAutogradContainer(const DistAutogradContainer&) = delete;
  DistAutogradContainer& operator=(const DistAutogradContainer&) = delete;

 private:
  ~DistAutogradContainer() = default;
};

}  // namespace autograd
}  // namespace distributed
}  // namespace torch

#endif  // DAC_TEST_NATIVE_DECLS_HPP
