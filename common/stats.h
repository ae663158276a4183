// Small order statistics shared by the controller's metrics and the CLI's
// learner logic, which read the same telemetry.
#pragma once

#include <vector>

namespace firedrill {

// Median of v (mean of the middle two for an even count); 0 when empty.
double Median(std::vector<double> v);

}  // namespace firedrill
