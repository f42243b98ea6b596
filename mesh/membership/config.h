// Tuning of the membership protocol. The named profiles carry memberlist's
// defaults (DefaultLANConfig, DefaultWANConfig) so that behaviour can be
// compared one to one; the fields memberlist lacks (reconnection, security
// limits) are ours and say why they have their value.
#ifndef MYCEL_MESH_MEMBERSHIP_CONFIG_H_
#define MYCEL_MESH_MEMBERSHIP_CONFIG_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace mycel::membership {

struct Config {
  // --- SWIM failure detection (memberlist LAN values) ---
  // One member is probed per interval, in shuffled round-robin order.
  absl::Duration probe_interval = absl::Seconds(1);
  // How long to wait for a direct ack before asking others to probe. Not
  // scaled by local health: waiting longer does not help a lost message.
  absl::Duration probe_timeout = absl::Milliseconds(500);
  // Members asked to ping the target when the direct probe fails.
  int indirect_checks = 3;

  // --- Suspicion (Lifeguard) ---
  // Minimum suspicion timeout: suspicion_mult * max(1, log10(n)) *
  // probe_interval; the maximum is suspicion_max_timeout_mult times that.
  // The timeout starts at the maximum and falls towards the minimum as
  // independent suspicions (up to suspicion_mult - 2) confirm it.
  int suspicion_mult = 4;
  int suspicion_max_timeout_mult = 6;
  // Local health multiplier ("awareness"): failed probes without nacks
  // raise a score s in [0, max-1]; probe periods stretch by (s + 1).
  int awareness_max_multiplier = 8;

  // How long a message that is not part of a probe (gossip, push-pull) may
  // take to reach its peer, connecting included: memberlist's TCPTimeout.
  // A probe's messages get probe_timeout: an answer later than that is
  // useless. Gossip and a join's push-pull are not, and on a busy host a
  // new mTLS connection can take longer than the probe timeout.
  absl::Duration delivery_timeout = absl::Seconds(10);

  // --- Dissemination ---
  // Each update is sent retransmit_mult * ceil(log10(n + 1)) times.
  int retransmit_mult = 4;
  // The news of a member that joined (new to the node passing it on, or
  // back from dead or left) is sent join_retransmit_mult * ceil(log10(n +
  // 1)) times. With memberlist's 4, when dozens join at once each record's
  // last copies go to random members and about one (member, joiner) pair in
  // a thousand is missed, until the next push-pull 30 to 60 s later (the
  // simulator's storm scenario at 50 nodes: 2 seeds of 10). Not in
  // memberlist; the extra copies are paid once per join, not at rest.
  int join_retransmit_mult = 12;
  absl::Duration gossip_interval = absl::Milliseconds(200);
  int gossip_nodes = 3;
  // Not in memberlist. With gossip_over_links, a round's gossip goes to
  // members this node has a connection with (it has sent to or heard from
  // them since they were last dead) once it has gossip_nodes of them;
  // until then, up to gossip_new_links others a round fill in. Over mTLS
  // a first message costs a handshake on both nodes: with uniform targets
  // (memberlist's, gossip_over_links = false) 50 nodes started at once on
  // the benchmark's 2 CPUs open most of their 1,225 connections while the
  // mesh forms, and the handshakes take the CPUs (docs/performance.md).
  // Probing still reaches every member, one a probe interval, so in a
  // settled mesh every member is linked and the choice is memberlist's.
  bool gossip_over_links = true;
  int gossip_new_links = 1;
  // Dead members still receive gossip this long, so they learn it and can
  // refute.
  absl::Duration gossip_to_the_dead_time = absl::Seconds(30);
  // Full-state sync with one random member; the period grows with the
  // cluster as in memberlist (x(ceil(log2(n) - 5) + 1) above 32 members).
  absl::Duration push_pull_interval = absl::Seconds(30);
  // Serialized bytes of piggybacked updates per message. memberlist's
  // 1400-byte UDP packet holds about 13 of its ~100-byte alives; ours carry a
  // signature and a certificate (~650 bytes), and gRPC has no MTU. 8 KiB
  // kept memberlist's 13 updates per message; 16 KiB, about 25, halves the
  // time a join storm takes to converge once the last node has started
  // (the simulator's storm of 50 nodes launched over 0.7 s, seeds 1 to 6:
  // 0.33-0.60 s from 0.87-1.29 s) for about 1.4x the bytes during the
  // storm, and nothing at rest, where no update waits.
  size_t gossip_budget_bytes = 16384;

  // --- Healing (not in memberlist) ---
  // Every interval (jittered by +-50%), a node contacts one dead member or
  // unanswered seed with a push-pull, with probability (candidates / live
  // members) so that the whole cluster makes about `candidates` attempts
  // per interval (Serf's reconnect rule). A node that knows no live member
  // always tries.
  absl::Duration reconnect_interval = absl::Seconds(10);
  // A node that knows no live member (it has not joined yet, or lost
  // everyone) tries its seeds and dead members this often instead, and
  // backs off from this base up to reconnect_interval: a join whose first
  // push-pull went unanswered (the seed busy with many joins at once) is
  // retried within about a second, as Consul's retry_join does.
  absl::Duration join_retry_interval = absl::Seconds(1);
  // Not in memberlist. Once a seed answered its join, a node syncs this
  // long later (jittered x0.5 to x1.5), not push_pull_interval later, with
  // a member it has a connection with (with gossip_over_links; else any
  // live member): the members that joined after it are then still news
  // travelling by gossip, and a node with few connections hears little
  // gossip. In the simulator's storm of 50 nodes started over 0.7 s (30 ms
  // per connection, seeds 31-80), the time from the last start to
  // convergence went from 0.86 s median and 1.62 s at most to 0.56 and
  // 1.35. Zero: no such sync.
  absl::Duration join_sync_delay = absl::Milliseconds(500);
  // Per-target backoff after unanswered attempts: interval * 2^failures,
  // capped here.
  absl::Duration reconnect_max_backoff = absl::Minutes(5);
  // Dead members are kept (and retried) this long, then forgotten; left
  // members are kept as tombstones as long (Serf's ReconnectTimeout and
  // TombstoneTimeout).
  absl::Duration dead_retention = absl::Hours(24);
  absl::Duration left_retention = absl::Hours(24);

  // --- Limits against bad peers ---
  // Largest message accepted or sent. A push-pull of 20,000 members (~650
  // bytes each) fits; the gRPC transport must allow at least this much.
  size_t max_message_bytes = 16 << 20;
  // Per authenticated peer token bucket. A healthy peer sends us well under
  // 20 messages a second (its gossip, its probes, acks and relays for us),
  // so this only bites on a flood.
  double peer_messages_per_second = 100;
  double peer_burst = 200;

  // memberlist's DefaultLANConfig.
  static Config Lan();
  // memberlist's DefaultWANConfig: slower probes, longer timeouts.
  static Config Wan();
};

// "lan" or "wan".
absl::StatusOr<Config> ConfigForProfile(absl::string_view name);

// INVALID_ARGUMENT naming the first field out of range.
absl::Status ValidateConfig(const Config& config);

// memberlist's suspicionTimeout: mult * max(1, log10(n)) * interval.
absl::Duration SuspicionTimeout(int suspicion_mult, int n,
                                absl::Duration probe_interval);
// memberlist's retransmitLimit: mult * ceil(log10(n + 1)).
int RetransmitLimit(int retransmit_mult, int n);
// memberlist's pushPullScale.
absl::Duration PushPullScale(absl::Duration interval, int n);

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_CONFIG_H_
