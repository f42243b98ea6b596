// The simulator's scenarios and the report they produce. Every figure is in
// simulated time and derived only from the seed, so the same options give a
// byte-identical report (FormatReport); wall time is not part of it.
//
//   join       N converged nodes; one more joins through a random seed. Time
//              until 50%, 99%, 99.99% and 100% of the N know of it.
//   crash      A random node stops. Time until the first suspicion, the
//              first death, and until every live node holds it dead.
//   restart    crash, then (once all hold it dead) it restarts from its
//              stored members with a wall-clock incarnation and no seed.
//              Time until every live node holds it alive at that incarnation.
//   partition  The nodes split into two groups (partition_fraction : rest)
//              for `duration`, then the cut heals with no manual join. Time
//              until every node again holds every other alive.
//   soak       `duration` of steady state (use with loss). False positives.
//   storm      The shape of the race against memberlist: one seed alone,
//              then the other N-1 nodes start and join it, spread evenly
//              over `duration` (0: all at once). Time from the first
//              joiner's start (and from the last one's) until every node
//              holds every other alive, and the connections opened until
//              then (Simulator::connections_opened). With `rest`, it runs
//              on that long after, reporting each 10 s's bytes.
//
// Every scenario also counts false positives (a node declared dead while it
// ran and could be reached) and traffic per node per second, where bytes are
// the serialized protobuf size of each message a node sent.
#ifndef MYCEL_MESH_SIM_SCENARIO_H_
#define MYCEL_MESH_SIM_SCENARIO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mesh/sim/simulator.h"

namespace mycel::sim {

struct ScenarioOptions {
  std::string scenario = "join";
  int nodes = 100;
  // "lan" or "wan"; sets sim.config.
  std::string profile = "lan";
  SimOptions sim;
  // Steady state before the scenario's event; its traffic is not counted.
  absl::Duration warmup = absl::Seconds(3);
  // partition: how long the cut lasts; soak: how long to run (zero picks
  // the default, 60 s and 300 s); storm: the launch window (zero: every
  // joiner starts at once).
  absl::Duration duration = absl::ZeroDuration();
  double partition_fraction = 0.4;
  // Config::gossip_over_links false: memberlist's uniform gossip targets.
  bool gossip_uniform = false;
  // Longest wait for the scenario's outcome before reporting it missed.
  absl::Duration limit = absl::Seconds(300);
  // storm: how long to run on once the mesh has converged, reporting the
  // bytes sent in each 10 s of it (the storm's wake).
  absl::Duration rest = absl::ZeroDuration();
};

// Seconds are simulated seconds after the scenario's event; -1 = never
// within the limit.
struct Report {
  std::string scenario;
  int nodes = 0;
  uint64_t seed = 0;
  std::string profile;
  double loss = 0;
  double latency_ms = 0;
  double jitter_ms = 0;
  double connect_ms = 0;
  bool gossip_uniform = false;
  bool wire = false;

  double gossip_interval_s = 0;
  double join_50_s = -1;
  double join_99_s = -1;
  double join_9999_s = -1;
  double join_100_s = -1;

  double crash_first_suspect_s = -1;
  double crash_first_dead_s = -1;
  double crash_all_dead_s = -1;

  double restart_all_alive_s = -1;
  uint64_t restart_old_incarnation = 0;
  uint64_t restart_new_incarnation = 0;

  double storm_launch_s = 0;
  double storm_converged_s = -1;         // from the first joiner's start
  double storm_after_last_start_s = -1;  // from the last joiner's start
  // Connections opened from the first joiner's start until convergence.
  uint64_t storm_connections = 0;
  // Bytes sent per node per second in each 10 s after convergence
  // (ScenarioOptions::rest).
  std::vector<double> storm_rest_bytes_per_node_s;

  double partition_s = 0;
  int64_t partition_deaths = 0;  // (observer, subject) across the cut
  double heal_s = -1;

  // Healthy, reachable nodes declared dead: per (observer, subject)
  // declaration, and per subject episode (first declaration until no node
  // holds it dead).
  int64_t fp_declarations = 0;
  int64_t fp_episodes = 0;
  double fp_max_s = 0;
  double fp_mean_s = 0;

  double window_s = 0;
  double messages_per_node_s = 0;
  double bytes_per_node_s = 0;

  uint64_t suspicions = 0;
  uint64_t refutations = 0;
  uint64_t deaths_declared = 0;
  uint64_t push_pulls = 0;
  uint64_t reconnects = 0;
  uint64_t rejected = 0;
  int max_health_score = 0;
  double simulated_s = 0;
  uint64_t events = 0;
};

absl::StatusOr<Report> RunScenario(const ScenarioOptions& options);

// One "key = value" line per figure, fixed precision.
std::string FormatReport(const Report& report);

}  // namespace mycel::sim

#endif  // MYCEL_MESH_SIM_SCENARIO_H_
