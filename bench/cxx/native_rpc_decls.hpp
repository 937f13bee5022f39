// native_rpc_decls.hpp: the one RpcAgent function of PyTorch 1.13 that the
// benchmark calls, restated from torch/csrc/distributed/rpc/rpc_agent.h (as
// capi_test/cpp/native_decls.hpp restates the container's; libtorch_cpu.so
// exports the symbol, Debian ships no header). Only the static member is
// declared: the benchmark never builds or touches an agent, it only sets a
// stand-in pointer (see harness.cpp, StandInAgent).
#ifndef DAC_BENCH_NATIVE_RPC_DECLS_HPP
#define DAC_BENCH_NATIVE_RPC_DECLS_HPP

#include <memory>

namespace torch {
namespace distributed {
namespace rpc {

class RpcAgent {
 public:
  static void setCurrentRpcAgent(std::shared_ptr<RpcAgent> rpcAgent);

  RpcAgent() = delete;
};

}  // namespace rpc
}  // namespace distributed
}  // namespace torch

#endif  // DAC_BENCH_NATIVE_RPC_DECLS_HPP
