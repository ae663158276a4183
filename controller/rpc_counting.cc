#include "controller/rpc_counting.h"

#include <string>

#include "common/status.h"

namespace firedrill::controller {

namespace {

namespace gx = grpc::experimental;

class RpcCounting final : public gx::Interceptor {
 public:
  RpcCounting(gx::ServerRpcInfo* info, ControllerCounters* counters) : counters_(counters) {
    // "/firedrill.v1.Drill/StartSession" -> "StartSession"
    const std::string full = info->method() ? info->method() : "";
    method_ = full.substr(full.rfind('/') + 1);
  }
  void Intercept(gx::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(gx::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const int code = methods->GetSendStatus().error_code();
      counters_->CountRpc(method_, code >= 0 && code <= 16 ? StatusCodeName(static_cast<StatusCode>(code))
                                                           : std::to_string(code));
    }
    methods->Proceed();
  }

 private:
  ControllerCounters* counters_;
  std::string method_;
};

class RpcCountingFactory final : public gx::ServerInterceptorFactoryInterface {
 public:
  explicit RpcCountingFactory(ControllerCounters* counters) : counters_(counters) {}
  gx::Interceptor* CreateServerInterceptor(gx::ServerRpcInfo* info) override {
    return new RpcCounting(info, counters_);
  }

 private:
  ControllerCounters* counters_;
};

}  // namespace

std::unique_ptr<gx::ServerInterceptorFactoryInterface> RpcCountingInterceptors(ControllerCounters* counters) {
  return std::make_unique<RpcCountingFactory>(counters);
}

}  // namespace firedrill::controller
