#include "mesh/sim/scenario.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace mycel::sim {
namespace {

using membership::MemberEvent;
using membership::MemberEventKind;
using membership::MemberState;

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// Watches every node's events for the figures all scenarios report.
class Observer {
 public:
  explicit Observer(Simulator* sim) : sim_(sim) {}

  void OnEvent(int observer, const MemberEvent& e) {
    const int subject = sim_->IndexOf(e.name);
    if (subject < 0 || subject == observer) return;
    if (subject == watched_) Watch(observer, e);
    const uint64_t key = Key(observer, subject);
    switch (e.kind) {
      case MemberEventKind::kFailed:
        if (!sim_->up(subject)) return;
        if (!sim_->network().Connected(observer, subject)) {
          ++report_->partition_deaths;
          return;
        }
        ++report_->fp_declarations;
        if (fp_pairs_.emplace(key, true).second) {
          if (holders_[subject]++ == 0) opened_[subject] = sim_->now();
        }
        return;
      case MemberEventKind::kJoined:
      case MemberEventKind::kLeft:
      case MemberEventKind::kRemoved: {
        auto it = fp_pairs_.find(key);
        if (it == fp_pairs_.end()) return;
        fp_pairs_.erase(it);
        if (--holders_[subject] == 0) {
          Close(sim_->now() - opened_[subject]);
        }
        return;
      }
      default:
        return;
    }
  }

  // Episodes still open at the end count with their length so far.
  void Finish() {
    for (const auto& [subject, count] : holders_) {
      if (count > 0) Close(sim_->now() - opened_[subject]);
    }
  }

  void set_report(Report* r) { report_ = r; }

  // Join and crash bookkeeping for one subject.
  void WatchSubject(int subject) {
    watched_ = subject;
    watch_start_ = sim_->now();
    seen_.assign(sim_->size() + 1, 0);
    seen_count_ = 0;
    seen_times_.clear();
    first_suspect_ = -1;
  }
  int seen_count() const { return seen_count_; }
  // Seconds after WatchSubject until the k-th observer (1-based).
  double SeenAt(int k) const {
    return k >= 1 && k <= static_cast<int>(seen_times_.size())
               ? seen_times_[k - 1]
               : -1;
  }
  double first_suspect() const { return first_suspect_; }
  void set_watch_kind(MemberEventKind k) { watch_kind_ = k; }

 private:
  static uint64_t Key(int a, int b) {
    return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
  }

  void Watch(int observer, const MemberEvent& e) {
    const double t = Seconds(sim_->now() - watch_start_);
    if (e.kind == MemberEventKind::kSuspected && first_suspect_ < 0) {
      first_suspect_ = t;
    }
    if (e.kind != watch_kind_) return;
    if (observer >= static_cast<int>(seen_.size())) seen_.resize(observer + 1);
    if (seen_[observer]) return;
    seen_[observer] = 1;
    ++seen_count_;
    seen_times_.push_back(t);
  }

  // Sums in integer microseconds, so that the order episodes close in
  // cannot change the mean.
  void Close(absl::Duration d) {
    ++report_->fp_episodes;
    report_->fp_max_s = std::max(report_->fp_max_s, Seconds(d));
    fp_total_us_ += absl::ToInt64Microseconds(d);
    report_->fp_mean_s = fp_total_us_ / 1e6 / report_->fp_episodes;
  }

  Simulator* sim_;
  Report* report_ = nullptr;
  // Only looked up, never iterated (iteration order would not replay),
  // except holders_ in Finish(), whose result does not depend on order.
  absl::flat_hash_map<uint64_t, bool> fp_pairs_;
  absl::flat_hash_map<int, int> holders_;
  absl::flat_hash_map<int, absl::Time> opened_;
  int64_t fp_total_us_ = 0;

  int watched_ = -1;
  MemberEventKind watch_kind_ = MemberEventKind::kJoined;
  absl::Time watch_start_;
  std::vector<char> seen_;
  int seen_count_ = 0;
  std::vector<double> seen_times_;
  double first_suspect_ = -1;
};

// Whether every live node holds every other live node alive. Resumes where
// the last check failed, so that repeated checks cost little.
class ConvergenceCheck {
 public:
  explicit ConvergenceCheck(Simulator* sim) : sim_(sim) {}
  bool operator()() {
    const int n = sim_->size();
    for (; o_ < n; ++o_, s_ = 0) {
      if (!sim_->up(o_)) continue;
      for (; s_ < n; ++s_) {
        if (s_ == o_ || !sim_->up(s_)) continue;
        std::optional<MemberState> st = sim_->node(o_)->StateOf(sim_->name(s_));
        if (!st || *st != MemberState::kAlive) return false;
      }
    }
    return true;
  }

 private:
  Simulator* sim_;
  int o_ = 0;
  int s_ = 0;
};

int RandomUpNode(Simulator* sim) {
  for (;;) {
    const int i = static_cast<int>(sim->prng().Uniform(sim->size()));
    if (sim->up(i)) return i;
  }
}

}  // namespace

absl::StatusOr<Report> RunScenario(const ScenarioOptions& options) {
  const std::string& sc = options.scenario;
  if (sc != "join" && sc != "crash" && sc != "restart" && sc != "partition" &&
      sc != "soak" && sc != "storm") {
    return absl::InvalidArgumentError(absl::StrCat(
        "scenario: unknown \"", sc,
        "\" (want join, crash, restart, partition, soak or storm)"));
  }
  if (options.nodes < 2) {
    return absl::InvalidArgumentError("nodes: at least 2");
  }
  SimOptions sim_options = options.sim;
  absl::StatusOr<membership::Config> config =
      membership::ConfigForProfile(options.profile);
  if (!config.ok()) return config.status();
  if (options.gossip_uniform) config->gossip_over_links = false;
  sim_options.config = *config;

  Report r;
  r.scenario = sc;
  r.nodes = options.nodes;
  r.seed = sim_options.seed;
  r.profile = options.profile;
  r.loss = sim_options.network.loss;
  r.latency_ms = absl::ToDoubleMilliseconds(sim_options.network.latency);
  r.jitter_ms = absl::ToDoubleMilliseconds(sim_options.network.jitter);
  r.connect_ms = absl::ToDoubleMilliseconds(sim_options.network.connect);
  r.gossip_uniform = !sim_options.config.gossip_over_links;
  r.wire = sim_options.wire;
  r.gossip_interval_s = Seconds(sim_options.config.gossip_interval);

  Simulator sim(sim_options);
  Observer observer(&sim);
  observer.set_report(&r);
  sim.set_event_hook(
      [&](int node, const MemberEvent& e) { observer.OnEvent(node, e); });
  const bool storm = sc == "storm";
  if (absl::Status s = sim.Bootstrap(storm ? 1 : options.nodes); !s.ok()) {
    return s;
  }
  sim.RunFor(options.warmup);

  const absl::Time window_start = sim.now();
  std::vector<Traffic> before;
  for (int i = 0; i < sim.size(); ++i) before.push_back(sim.traffic(i));

  if (storm) {
    const int joiners = options.nodes - 1;
    const absl::Duration gap =
        joiners > 1 ? options.duration / (joiners - 1) : absl::ZeroDuration();
    const absl::Time first = sim.now();
    const uint64_t connections_before = sim.connections_opened();
    for (int k = 0; k < joiners; ++k) {
      if (k > 0 && gap > absl::ZeroDuration()) sim.RunFor(gap);
      absl::StatusOr<int> joiner = sim.AddJoiningNode(0);
      if (!joiner.ok()) return joiner.status();
    }
    const absl::Time last = sim.now();
    r.storm_launch_s = Seconds(last - first);
    ConvergenceCheck converged(&sim);
    if (sim.RunUntilTrue(converged, absl::Milliseconds(10), options.limit)) {
      r.storm_converged_s = Seconds(sim.now() - first);
      r.storm_after_last_start_s = Seconds(sim.now() - last);
      r.storm_connections = sim.connections_opened() - connections_before;
      const absl::Duration bucket = absl::Seconds(10);
      for (absl::Duration d = absl::ZeroDuration(); d < options.rest;
           d += bucket) {
        uint64_t at_start = 0;
        for (int i = 0; i < sim.size(); ++i) at_start += sim.traffic(i).bytes;
        sim.RunFor(bucket);
        uint64_t at_end = 0;
        for (int i = 0; i < sim.size(); ++i) at_end += sim.traffic(i).bytes;
        r.storm_rest_bytes_per_node_s.push_back(
            static_cast<double>(at_end - at_start) /
            (absl::ToDoubleSeconds(bucket) * sim.size()));
      }
    }
  } else if (sc == "join") {
    const int seed_node = RandomUpNode(&sim);
    observer.set_watch_kind(MemberEventKind::kJoined);
    observer.WatchSubject(sim.size());
    absl::StatusOr<int> joiner = sim.AddJoiningNode(seed_node);
    if (!joiner.ok()) return joiner.status();
    const int n = options.nodes;
    sim.RunUntilTrue([&] { return observer.seen_count() >= n; },
                     absl::Milliseconds(100), options.limit);
    // The k-th of n existing nodes; ceil so that 99.99% of 10,000 is 9,999.
    auto at = [&](double fraction) {
      return observer.SeenAt(static_cast<int>(std::ceil(fraction * n - 1e-9)));
    };
    r.join_50_s = at(0.5);
    r.join_99_s = at(0.99);
    r.join_9999_s = at(0.9999);
    r.join_100_s = at(1.0);
  } else if (sc == "crash" || sc == "restart") {
    const int victim = RandomUpNode(&sim);
    observer.set_watch_kind(MemberEventKind::kFailed);
    observer.WatchSubject(victim);
    sim.Crash(victim);
    const int live = options.nodes - 1;
    sim.RunUntilTrue([&] { return observer.seen_count() >= live; },
                     absl::Milliseconds(100), options.limit);
    r.crash_first_suspect_s = observer.first_suspect();
    r.crash_first_dead_s = observer.SeenAt(1);
    r.crash_all_dead_s = observer.SeenAt(live);
    if (sc == "restart") {
      r.restart_old_incarnation =
          sim.node(RandomUpNode(&sim))->Find(sim.name(victim))->incarnation;
      if (absl::Status s = sim.Restart(victim); !s.ok()) return s;
      r.restart_new_incarnation = sim.node(victim)->incarnation();
      const absl::Time restarted = sim.now();
      const std::string& name = sim.name(victim);
      const uint64_t inc = r.restart_new_incarnation;
      int next = 0;
      const bool ok = sim.RunUntilTrue(
          [&] {
            for (; next < sim.size(); ++next) {
              if (next == victim || !sim.up(next)) continue;
              std::optional<membership::MemberSnapshot> m =
                  sim.node(next)->Find(name);
              if (!m || m->state != MemberState::kAlive ||
                  m->incarnation < inc) {
                return false;
              }
            }
            return true;
          },
          absl::Milliseconds(100), options.limit);
      if (ok) r.restart_all_alive_s = Seconds(sim.now() - restarted);
    }
  } else if (sc == "partition") {
    const absl::Duration hold = options.duration > absl::ZeroDuration()
                                    ? options.duration
                                    : absl::Seconds(60);
    std::vector<int> order(sim.size());
    for (int i = 0; i < sim.size(); ++i) order[i] = i;
    sim.prng().Shuffle(&order);
    std::vector<int> groups(sim.size(), 0);
    const int a = static_cast<int>(options.partition_fraction * sim.size());
    for (int k = a; k < sim.size(); ++k) groups[order[k]] = 1;
    sim.network().Partition(groups);
    sim.RunFor(hold);
    r.partition_s = Seconds(hold);
    sim.network().Heal();
    const absl::Time healed = sim.now();
    ConvergenceCheck converged(&sim);
    if (sim.RunUntilTrue(converged, absl::Milliseconds(250), options.limit)) {
      r.heal_s = Seconds(sim.now() - healed);
    }
  } else {  // soak
    const absl::Duration d = options.duration > absl::ZeroDuration()
                                 ? options.duration
                                 : absl::Seconds(300);
    sim.RunFor(d);
  }
  observer.Finish();

  r.window_s = Seconds(sim.now() - window_start);
  uint64_t messages = 0, bytes = 0;
  for (int i = 0; i < sim.size(); ++i) {
    const Traffic& t = sim.traffic(i);
    const Traffic b =
        i < static_cast<int>(before.size()) ? before[i] : Traffic{};
    messages += t.messages - b.messages;
    bytes += t.bytes - b.bytes;
    if (!sim.up(i)) continue;
    const membership::MembershipStats& s = sim.node(i)->stats();
    r.suspicions += s.suspicions;
    r.refutations += s.refutations;
    r.deaths_declared += s.deaths_declared;
    r.push_pulls += s.push_pulls_sent;
    r.reconnects += s.reconnect_attempts;
    r.rejected += s.rejected_malformed + s.rejected_oversized +
                  s.rejected_rate_limited + s.rejected_sender_mismatch +
                  s.alive_rejected_name + s.alive_rejected_signature;
    r.max_health_score =
        std::max(r.max_health_score, sim.node(i)->health_score());
  }
  if (r.window_s > 0) {
    r.messages_per_node_s = messages / (r.window_s * sim.size());
    r.bytes_per_node_s = bytes / (r.window_s * sim.size());
  }
  r.simulated_s = Seconds(sim.now() - sim.start());
  r.events = sim.events_processed();
  return r;
}

std::string FormatReport(const Report& r) {
  std::string out;
  auto line = [&](absl::string_view key, const std::string& value) {
    absl::StrAppend(&out, key, " = ", value, "\n");
  };
  auto sec = [](double s) {
    return s < 0 ? std::string("never") : absl::StrFormat("%.3f", s);
  };
  line("scenario", r.scenario);
  line("nodes", absl::StrCat(r.nodes));
  line("seed", absl::StrCat(r.seed));
  line("profile", r.profile);
  line("loss", absl::StrFormat("%.3f", r.loss));
  line("latency_ms",
       absl::StrFormat("%.3f + U[0, %.3f)", r.latency_ms, r.jitter_ms));
  line("connect_ms", absl::StrFormat("%.3f", r.connect_ms));
  line("gossip_targets", r.gossip_uniform ? "uniform" : "over links");
  line("wire", r.wire ? "encoded" : "structs (sizes as encoded)");
  if (r.scenario == "join") {
    auto rounds = [&](double s) {
      return s < 0 ? std::string("never")
                   : absl::StrFormat("%.1f", s / r.gossip_interval_s);
    };
    line("join_50pct_s", sec(r.join_50_s));
    line("join_99pct_s", sec(r.join_99_s));
    line("join_99.99pct_s", sec(r.join_9999_s));
    line("join_99.99pct_rounds", rounds(r.join_9999_s));
    line("join_100pct_s", sec(r.join_100_s));
  }
  if (r.scenario == "crash" || r.scenario == "restart") {
    line("crash_first_suspect_s", sec(r.crash_first_suspect_s));
    line("crash_first_dead_s", sec(r.crash_first_dead_s));
    line("crash_all_dead_s", sec(r.crash_all_dead_s));
  }
  if (r.scenario == "restart") {
    line("restart_old_incarnation", absl::StrCat(r.restart_old_incarnation));
    line("restart_new_incarnation", absl::StrCat(r.restart_new_incarnation));
    line("restart_all_alive_s", sec(r.restart_all_alive_s));
  }
  if (r.scenario == "storm") {
    line("storm_launch_s", sec(r.storm_launch_s));
    line("storm_converged_s", sec(r.storm_converged_s));
    line("storm_after_last_start_s", sec(r.storm_after_last_start_s));
    line("storm_connections", absl::StrCat(r.storm_connections));
    if (!r.storm_rest_bytes_per_node_s.empty()) {
      line("storm_rest_bytes_per_node_s_per_10s",
           absl::StrJoin(r.storm_rest_bytes_per_node_s, " ",
                         [](std::string* out, double b) {
                           absl::StrAppend(out, absl::StrFormat("%.0f", b));
                         }));
    }
  }
  if (r.scenario == "partition") {
    line("partition_s", sec(r.partition_s));
    line("partition_deaths", absl::StrCat(r.partition_deaths));
    line("heal_all_alive_s", sec(r.heal_s));
  }
  line("false_positive_declarations", absl::StrCat(r.fp_declarations));
  line("false_positive_episodes", absl::StrCat(r.fp_episodes));
  line("false_positive_max_s", absl::StrFormat("%.3f", r.fp_max_s));
  line("false_positive_mean_s", absl::StrFormat("%.3f", r.fp_mean_s));
  line("traffic_window_s", absl::StrFormat("%.3f", r.window_s));
  line("messages_per_node_s", absl::StrFormat("%.2f", r.messages_per_node_s));
  line("bytes_per_node_s", absl::StrFormat("%.0f", r.bytes_per_node_s));
  line("suspicions", absl::StrCat(r.suspicions));
  line("refutations", absl::StrCat(r.refutations));
  line("deaths_declared", absl::StrCat(r.deaths_declared));
  line("push_pulls", absl::StrCat(r.push_pulls));
  line("reconnect_attempts", absl::StrCat(r.reconnects));
  line("rejected_messages", absl::StrCat(r.rejected));
  line("max_health_score", absl::StrCat(r.max_health_score));
  line("simulated_s", absl::StrFormat("%.3f", r.simulated_s));
  line("events", absl::StrCat(r.events));
  return out;
}

}  // namespace mycel::sim
