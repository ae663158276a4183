#include "faults/silent_divergence.h"

#include <string>

namespace firedrill::faults {

Status SilentDivergence::Apply(Seams& s) {
  if (!s.parameters) return MissingSeam("silent_divergence", "parameters");
  return s.parameters->FlipBit(id_, p_.tensor(), p_.element(), p_.bit());
}

Status SilentDivergence::Recover(Seams&) {
  return Status::Ok();  // a flipped bit is not unflipped when the fault ends
}

Status ValidateSilentDivergence(const v1::FaultSpec& spec) {
  const auto& p = spec.silent_divergence();
  if (p.tensor() < 0) return InvalidArgument("params.tensor must be >= 0 (a parameter's index, taken modulo their count)");
  if (p.element() < 0) return InvalidArgument("params.element must be >= 0 (taken modulo the tensor's size)");
  // A mantissa bit: the value changes by less than a factor of two, so the
  // job trains on and nothing fails. An exponent bit can make it 1e38.
  if (p.bit() < 0 || p.bit() > 22)
    return InvalidArgument("params.bit must be a mantissa bit, 0..22 (an exponent bit would not stay silent), got " +
                           std::to_string(p.bit()));
  return Status::Ok();
}

}  // namespace firedrill::faults
