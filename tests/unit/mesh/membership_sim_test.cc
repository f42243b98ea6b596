// Simulated clusters (mesh/sim) running the real state machine: the figures
// a fleet relies on, with bounds derived from the protocol's parameters
// (LAN profile, 2-3 ms one-way latency unless stated).
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "mesh/sim/scenario.h"

namespace mycel::sim {
namespace {

ScenarioOptions Options(const std::string& scenario, int nodes, uint64_t seed) {
  ScenarioOptions o;
  o.scenario = scenario;
  o.nodes = nodes;
  o.sim.seed = seed;
  return o;
}

Report Run(const ScenarioOptions& o) {
  absl::StatusOr<Report> r = RunScenario(o);
  REQUIRE(r.ok());
  MESSAGE(FormatReport(*r));
  return *r;
}

TEST_CASE("a join reaches every node within a few gossip rounds") {
  const Report r = Run(Options("join", 300, 1));
  // Epidemic spread with fanout 3 every 200 ms: each round an informed node
  // tells 3 more, so log4(300) ~ 4 rounds (0.8 s) reach most; the seed's
  // push-pull adds one round trip, and the tail takes a few more rounds.
  // Serf's model puts 99.99% of 300 nodes well under 1.5 s.
  CHECK(r.join_50_s > 0);
  CHECK(r.join_9999_s <= 1.5);
  CHECK(r.join_100_s <= 2.0);
  CHECK(r.fp_declarations == 0);
}

TEST_CASE("49 nodes joining one seed at once all know each other in 2.5 s") {
  // The race against memberlist, where 3 of 13 runs of 50 nodes took 61-72
  // s: a join's last copies went elsewhere and one member never heard of
  // it until the next push-pull. With join news sent three times as often
  // (join_retransmit_mult) no seed of these takes longer than a few rounds.
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    ScenarioOptions o = Options("storm", 50, seed);
    absl::StatusOr<Report> r = RunScenario(o);
    REQUIRE(r.ok());
    CAPTURE(seed);
    CHECK(r->storm_converged_s > 0);
    CHECK(r->storm_converged_s <= 2.5);
    CHECK(r->fp_declarations == 0);
    // Gossip over the connections a node has: each node opens a few, not
    // one to most of the other 49 (1,225 pairs in all).
    CHECK(r->storm_connections > 49);
    CHECK(r->storm_connections <= 250);
    // memberlist's uniform targets open about three times as many.
    ScenarioOptions uniform = o;
    uniform.gossip_uniform = true;
    absl::StatusOr<Report> u = RunScenario(uniform);
    REQUIRE(u.ok());
    CHECK(u->storm_converged_s <= 2.5);
    CHECK(u->storm_connections >= 2 * r->storm_connections);
    // Started over 2 s, as daemons on one host are: done soon after the
    // last one starts.
    o.duration = absl::Seconds(2);
    r = RunScenario(o);
    REQUIRE(r.ok());
    CHECK(r->storm_launch_s == doctest::Approx(2.0));
    CHECK(r->storm_after_last_start_s > 0);
    CHECK(r->storm_after_last_start_s <= 1.5);
  }
}

TEST_CASE("after a storm of joins, syncs stop sending every record whole") {
  // Once the storm has converged, a member's first record is no news: a
  // periodic sync names it. Only the records that replaced another (a
  // refutation) go whole for the longer while. Before, every record of the
  // storm went whole in each sync for 6 suspicion timeouts (41 s at 50
  // members): 404-1,119 B/s per node 20-30 s after convergence in these
  // seeds, against 37-78 now and about 15 at rest.
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    ScenarioOptions o = Options("storm", 50, seed);
    o.sim.network.connect = absl::Milliseconds(30);
    o.duration = absl::Milliseconds(700);
    o.rest = absl::Seconds(60);
    absl::StatusOr<Report> r = RunScenario(o);
    REQUIRE(r.ok());
    CAPTURE(seed);
    CHECK(r->storm_converged_s > 0);
    REQUIRE(r->storm_rest_bytes_per_node_s.size() == 6);
    // 20-30 s after convergence: the first periodic syncs (every 30 s at
    // this size, from a random phase) fall here.
    CHECK(r->storm_rest_bytes_per_node_s[2] < 200);
    // At rest (40-60 s), a few pings and acks a second.
    CHECK(r->storm_rest_bytes_per_node_s[4] < 100);
    CHECK(r->storm_rest_bytes_per_node_s[5] < 100);
  }
}

TEST_CASE("a crashed node is declared dead by every live node in bounds") {
  const Report r = Run(Options("crash", 300, 2));
  // Lower bound: nobody may declare death before the minimum suspicion
  // timeout, 4 * log10(300) * 1 s = 9.9 s, after the first suspicion.
  const double min_suspicion = 4 * std::log10(300.0);
  REQUIRE(r.crash_first_suspect_s >= 0);
  CHECK(r.crash_first_dead_s - r.crash_first_suspect_s >= min_suspicion - 0.01);
  // Upper bound: 299 probers each probe a random member every second, so
  // one reaches it within ~1-2 s; the probe takes 1 s; independent
  // suspicions (k = 2) arrive within seconds, bringing the timeout to its
  // minimum; the death then spreads in under a second. 1 + 1 + 9.9 + 2 s.
  CHECK(r.crash_all_dead_s <= 14.0);
  CHECK(r.fp_declarations == 0);
}

// 200 healthy nodes for `duration` with `loss` of every message lost.
Report Soak(uint64_t seed, double loss, absl::Duration duration) {
  ScenarioOptions o = Options("soak", 200, seed);
  o.sim.network.loss = loss;
  o.duration = duration;
  return Run(o);
}

TEST_CASE("no false positives at 10% message loss over five minutes") {
  // Eight seeds: before stale suspicions were answered with the refuting
  // record (Membership::CorrectStaleAccusation), 12 of seeds 1-25 ended in
  // 1 to 3 false deaths each (seed 5 here made 2), a node that had missed
  // every copy of a refutation declaring a live member dead.
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    CAPTURE(seed);
    const Report r = Soak(seed, 0.1, absl::Minutes(5));
    // The loss is real: probes fail and members get suspected...
    CHECK(r.suspicions > 0);
    CHECK(r.refutations > 100);
    // ...but Lifeguard (nacks, local health, confirmations, the buddy
    // system) gets every refutation in before the suspicion timeout, and a
    // node that missed one hears it again from whoever it tells.
    CHECK(r.fp_declarations == 0);
    CHECK(r.deaths_declared == 0);
  }
}

TEST_CASE("at 20% message loss, false deaths stay rare and local") {
  // At 20% loss 200 nodes refute about 14 suspicions a second. Before
  // stale suspicions were answered, 16 of seeds 1-25 ended in false deaths
  // (33 in all over 5 minutes); with the answers, one of the 25 did (one
  // false death, held 0.19 s). What must hold in any case:
  for (uint64_t seed = 3; seed <= 5; ++seed) {
    CAPTURE(seed);
    const Report r = Soak(seed, 0.2, absl::Minutes(3));
    CHECK(r.refutations > 1000);
    // Each false death stays with the one node that declared it: everyone
    // else holds the refuted, higher incarnation and ignores it.
    CHECK(r.fp_declarations == r.fp_episodes);
    // Fewer than 1 in 1,000 refuted suspicions ends in a false death
    // anywhere (1 in 200 was the bound before the answers).
    CHECK(r.fp_declarations * 1000 < static_cast<int64_t>(r.refutations));
  }
}

TEST_CASE("a 2|3 partition longer than the suspicion timeout heals itself") {
  ScenarioOptions o = Options("partition", 200, 4);
  o.partition_fraction = 0.4;
  o.duration = absl::Seconds(90);
  const Report r = Run(o);
  // The maximum suspicion timeout at 200 nodes is 6 * 4 * log10(200) =
  // 55 s < 90 s: each side declared the whole other side dead.
  CHECK(r.partition_deaths >= 2 * 80 * 120);
  // With no manual join: the first reconnection comes within one jittered
  // reconnect interval (<= 15 s, usually far less since every node tries);
  // each answer chains the next try within ~1 s, the refutations that
  // follow spread by gossip and push-pull. Bound: 15 + 15 s.
  REQUIRE(r.heal_s >= 0);
  CHECK(r.heal_s <= 30.0);
  CHECK(r.reconnects > 0);
}

TEST_CASE("a restarted node comes back alive with a higher incarnation") {
  const Report r = Run(Options("restart", 100, 5));
  REQUIRE(r.crash_all_dead_s >= 0);
  CHECK(r.restart_new_incarnation > r.restart_old_incarnation);
  // It rejoins from its stored members with no seed: one push-pull, then
  // its new record spreads by gossip (~log4(100) rounds of 200 ms) and
  // push-pull; 3 s allows for the tail.
  REQUIRE(r.restart_all_alive_s >= 0);
  CHECK(r.restart_all_alive_s <= 3.0);
}

TEST_CASE("the same seed replays byte for byte; another seed differs") {
  ScenarioOptions o = Options("crash", 80, 11);
  o.sim.network.loss = 0.05;
  const std::string first = FormatReport(*RunScenario(o));
  const std::string again = FormatReport(*RunScenario(o));
  CHECK(first == again);
  o.sim.seed = 12;
  CHECK(FormatReport(*RunScenario(o)) != first);
}

TEST_CASE("encoding every message on the wire changes nothing") {
  // Structs with shared records in one run, protobuf bytes decoded at every
  // receiver in the other: the codec is lossless and EncodedSize exact, so
  // every figure, bytes included, must match.
  for (const char* scenario : {"join", "crash"}) {
    ScenarioOptions o = Options(scenario, 60, 21);
    o.sim.network.loss = 0.05;
    std::string structs = FormatReport(*RunScenario(o));
    o.sim.wire = true;
    std::string wire = FormatReport(*RunScenario(o));
    structs.erase(
        structs.find("wire = "),
        structs.find('\n', structs.find("wire = ")) - structs.find("wire = "));
    wire.erase(wire.find("wire = "),
               wire.find('\n', wire.find("wire = ")) - wire.find("wire = "));
    CHECK(structs == wire);
  }
}

}  // namespace
}  // namespace mycel::sim
