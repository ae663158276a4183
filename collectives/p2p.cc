// Point to point: a send and its receive carry the message once. `probe p2p`
// times every ordered pair alone (nccl-tests' sendrecv, pair by pair), and
// the receiver checks every element against the sender's pattern.
#include "collectives/internal.h"

namespace firedrill::collectives {

namespace {
int64_t Whole(int64_t bytes, int) { return bytes; }
Buffers OneMessage(int64_t size, int) {
  const int64_t count = Elements(size);
  return Buffers{count, count, count};
}
float SenderPattern(int rank, int, int64_t, int64_t i) { return Pattern(rank, i); }
}  // namespace

// The receiver's expected value names the sender as `rank`.
const Collective kP2p = {"p2p", "sendrecv", "none", true, Whole, NoFactor, OneMessage, SenderPattern, SenderPattern};
const Collective kSend = {"send", "", "none", false, Whole, NoFactor, NoBuffers, NoValue, NoValue};
const Collective kRecv = {"recv", "", "none", false, Whole, NoFactor, NoBuffers, NoValue, NoValue};

}  // namespace firedrill::collectives
