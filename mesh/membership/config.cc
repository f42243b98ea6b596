#include "mesh/membership/config.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace mycel::membership {

Config Config::Lan() { return Config(); }

Config Config::Wan() {
  Config c;
  c.suspicion_mult = 6;
  c.push_pull_interval = absl::Seconds(60);
  c.probe_timeout = absl::Seconds(3);
  c.probe_interval = absl::Seconds(5);
  c.gossip_nodes = 4;
  c.gossip_interval = absl::Milliseconds(500);
  c.gossip_to_the_dead_time = absl::Seconds(60);
  c.delivery_timeout = absl::Seconds(30);
  c.join_sync_delay = absl::Seconds(2);
  return c;
}

absl::StatusOr<Config> ConfigForProfile(absl::string_view name) {
  if (name == "lan") return Config::Lan();
  if (name == "wan") return Config::Wan();
  return absl::InvalidArgumentError(
      absl::StrCat("profile: unknown \"", name, "\" (want lan or wan)"));
}

absl::Status ValidateConfig(const Config& c) {
  auto positive = [](absl::Duration d) { return d > absl::ZeroDuration(); };
  if (!positive(c.probe_interval))
    return absl::InvalidArgumentError("probe_interval: must be positive");
  if (!positive(c.probe_timeout) || c.probe_timeout > c.probe_interval)
    return absl::InvalidArgumentError(
        "probe_timeout: must be positive and at most probe_interval");
  if (c.indirect_checks < 0)
    return absl::InvalidArgumentError("indirect_checks: must be >= 0");
  if (c.delivery_timeout < c.probe_timeout)
    return absl::InvalidArgumentError(
        "delivery_timeout: must be at least probe_timeout");
  if (c.suspicion_mult < 1)
    return absl::InvalidArgumentError("suspicion_mult: must be >= 1");
  if (c.suspicion_max_timeout_mult < 1)
    return absl::InvalidArgumentError(
        "suspicion_max_timeout_mult: must be >= 1");
  if (c.awareness_max_multiplier < 1)
    return absl::InvalidArgumentError("awareness_max_multiplier: must be >= 1");
  if (c.retransmit_mult < 1)
    return absl::InvalidArgumentError("retransmit_mult: must be >= 1");
  if (c.join_retransmit_mult < c.retransmit_mult)
    return absl::InvalidArgumentError(
        "join_retransmit_mult: must be at least retransmit_mult");
  if (!positive(c.gossip_interval) || c.gossip_nodes < 1)
    return absl::InvalidArgumentError(
        "gossip_interval, gossip_nodes: must be positive");
  if (c.gossip_new_links < 1 || c.gossip_new_links > c.gossip_nodes)
    return absl::InvalidArgumentError(
        "gossip_new_links: must be in [1, gossip_nodes]");
  if (!positive(c.push_pull_interval))
    return absl::InvalidArgumentError("push_pull_interval: must be positive");
  if (!positive(c.reconnect_interval) ||
      c.reconnect_max_backoff < c.reconnect_interval)
    return absl::InvalidArgumentError(
        "reconnect_interval: must be positive and at most "
        "reconnect_max_backoff");
  if (!positive(c.join_retry_interval))
    return absl::InvalidArgumentError("join_retry_interval: must be positive");
  if (c.join_sync_delay < absl::ZeroDuration())
    return absl::InvalidArgumentError("join_sync_delay: must be >= 0");
  if (c.gossip_budget_bytes < 1024 ||
      c.gossip_budget_bytes > c.max_message_bytes / 2)
    return absl::InvalidArgumentError(
        "gossip_budget_bytes: must be in [1024, max_message_bytes / 2]");
  if (c.peer_messages_per_second <= 0 || c.peer_burst < 1)
    return absl::InvalidArgumentError(
        "peer_messages_per_second, peer_burst: must be positive");
  return absl::OkStatus();
}

absl::Duration SuspicionTimeout(int suspicion_mult, int n,
                                absl::Duration probe_interval) {
  const double node_scale =
      std::max(1.0, std::log10(std::max(1.0, static_cast<double>(n))));
  // Millisecond precision, as memberlist computes it.
  const int64_t scale_ms = static_cast<int64_t>(node_scale * 1000);
  return suspicion_mult * scale_ms * probe_interval / 1000;
}

int RetransmitLimit(int retransmit_mult, int n) {
  const double node_scale = std::ceil(std::log10(static_cast<double>(n) + 1));
  return retransmit_mult * static_cast<int>(node_scale);
}

absl::Duration PushPullScale(absl::Duration interval, int n) {
  constexpr int kThreshold = 32;
  if (n <= kThreshold) return interval;
  const double multiplier =
      std::ceil(std::log2(static_cast<double>(n)) - std::log2(kThreshold)) +
      1.0;
  return static_cast<int64_t>(multiplier) * interval;
}

}  // namespace mycel::membership
