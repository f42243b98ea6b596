#include "mesh/sim/network.h"

namespace mycel::sim {

bool Network::Deliver(int from, int to, membership::Prng* prng,
                      absl::Duration* delay) const {
  const bool lost = options_.loss > 0 && prng->Bernoulli(options_.loss);
  *delay = options_.latency + options_.jitter * prng->UniformDouble();
  return !lost && Connected(from, to);
}

}  // namespace mycel::sim
