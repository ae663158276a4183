// Counts every call a gRPC server answers, by method and status code, into
// ControllerCounters (/metrics' firedrill_rpcs_total): a server interceptor,
// so no service method has to remember to.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <memory>

#include "controller/web_metrics.h"

namespace firedrill::controller {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> RpcCountingInterceptors(
    ControllerCounters* counters);

}  // namespace firedrill::controller
