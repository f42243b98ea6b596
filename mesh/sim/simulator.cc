#include "mesh/sim/simulator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "mesh/membership/codec.h"

namespace mycel::sim {
namespace {

using membership::Membership;
using membership::MembershipOptions;
using membership::MemberSnapshot;
using membership::MemberState;

int64_t Us(absl::Time t) { return absl::ToUnixMicros(t); }

// Virtual time advances in whole microseconds; a deadline between two
// ticks is served at the later one, never before it is due.
int64_t CeilUs(absl::Time t) {
  const int64_t us = absl::ToUnixMicros(t);
  return absl::FromUnixMicros(us) < t ? us + 1 : us;
}

uint64_t RealmSecret(uint64_t seed) {
  uint64_t s = seed ^ 0x6d7963656c2d6361ULL;  // "mycel-ca"
  return membership::SplitMix64(&s);
}

}  // namespace

Simulator::Simulator(SimOptions options)
    : options_(std::move(options)),
      prng_(options_.seed),
      network_(options_.network),
      verifier_(RealmSecret(options_.seed)),
      realm_secret_(RealmSecret(options_.seed)),
      // A fixed epoch, so that wall-clock-derived incarnations replay.
      start_(absl::FromUnixSeconds(1767225600)),
      now_(start_) {}

Simulator::~Simulator() = default;

int Simulator::NewNode() {
  const int i = static_cast<int>(nodes_.size());
  Node n;
  n.name = absl::StrFormat("node-%05d", i);
  n.address = absl::StrFormat("10.%d.%d.%d:7946", (i >> 16) & 255,
                              (i >> 8) & 255, i & 255);
  n.signer = std::make_unique<membership::FakeSigner>(realm_secret_, n.name);
  by_name_[n.name] = i;
  by_address_[n.address] = i;
  nodes_.push_back(std::move(n));
  return i;
}

MembershipOptions Simulator::BaseOptions(int i) {
  const Node& n = nodes_[i];
  MembershipOptions o;
  o.config = options_.config;
  o.name = n.name;
  // What a driver without a persisted incarnation does: the wall clock in
  // microseconds, above anything an earlier run of the node said.
  o.incarnation = static_cast<uint64_t>(Us(now_));
  o.meta.addresses = {n.address};
  o.meta.labels = {{"rack", absl::StrFormat("r%02d", i % 40)},
                   {"zone", absl::StrFormat("z%d", i % 3)}};
  o.meta.capacity = {{"cpu_millicores", 8000},
                     {"memory_bytes", int64_t{32} << 30}};
  o.random_seed = prng_.Next();
  o.signer = n.signer.get();
  o.verifier = &verifier_;
  return o;
}

absl::Status Simulator::StartNode(int i, MembershipOptions options) {
  absl::StatusOr<std::unique_ptr<Membership>> m =
      Membership::Create(std::move(options), now_);
  if (!m.ok()) return m.status();
  Node& n = nodes_[i];
  n.m = *std::move(m);
  n.up = true;
  n.wake_us = INT64_MAX;
  AfterCall(i);
  return absl::OkStatus();
}

absl::Status Simulator::Bootstrap(int count) {
  const int first = size();
  for (int k = 0; k < count; ++k) NewNode();
  // Every node's record, signed once and shared by all who hold it.
  std::vector<MemberSnapshot> all;
  all.reserve(count);
  for (int i = first; i < first + count; ++i) {
    MembershipOptions o = BaseOptions(i);
    membership::Alive a;
    a.name = o.name;
    a.incarnation = o.incarnation;
    a.meta = o.meta;
    if (absl::Status s = nodes_[i].signer->Sign(&a); !s.ok()) return s;
    auto record = std::make_shared<const membership::Alive>(std::move(a));
    all.push_back(MemberSnapshot{record->name, MemberState::kAlive,
                                 record->incarnation, record, now_,
                                 absl::InfinitePast()});
  }
  for (int i = first; i < first + count; ++i) {
    MembershipOptions o = BaseOptions(i);
    o.members = all;
    o.rejoin_on_start = false;
    if (absl::Status s = StartNode(i, std::move(o)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Simulator::AddJoiningNode(int seed_node) {
  const int i = NewNode();
  MembershipOptions o = BaseOptions(i);
  if (absl::Status s = StartNode(i, std::move(o)); !s.ok()) return s;
  const std::string seed = nodes_[seed_node].address;
  nodes_[i].m->Join({seed}, now_);
  AfterCall(i);
  return i;
}

void Simulator::Crash(int i) {
  Node& n = nodes_[i];
  if (!n.up) return;
  n.persisted = n.m->Snapshot();
  n.seeds = n.m->seeds();
  n.m.reset();
  n.up = false;
  n.wake_us = INT64_MAX;
  ++n.epoch;
}

bool Simulator::Connect(int a, int b) {
  if (a > b) std::swap(a, b);
  const uint64_t key =
      static_cast<uint64_t>(a) << 32 | static_cast<uint32_t>(b);
  const std::pair<uint32_t, uint32_t> now{nodes_[a].epoch, nodes_[b].epoch};
  auto [it, added] = connections_.try_emplace(key, now);
  if (!added && it->second == now) return false;
  it->second = now;
  ++connections_opened_;
  return true;
}

absl::Status Simulator::Restart(int i) {
  Node& n = nodes_[i];
  if (n.up) return absl::FailedPreconditionError("node is up");
  MembershipOptions o = BaseOptions(i);
  o.members = std::move(n.persisted);
  o.seeds = std::move(n.seeds);
  n.persisted.clear();
  n.seeds.clear();
  return StartNode(i, std::move(o));
}

void Simulator::Push(absl::Time when, int node,
                     std::unique_ptr<Delivery> delivery) {
  queue_.push_back(Event{CeilUs(when), order_++, node, std::move(delivery)});
  std::push_heap(queue_.begin(), queue_.end(), std::greater<>());
}

void Simulator::AfterCall(int i) {
  Node& n = nodes_[i];
  for (membership::Outbound& out : n.m->TakeOutbox()) {
    int to = -1;
    if (!out.to.empty()) {
      auto it = by_name_.find(out.to);
      if (it != by_name_.end()) to = it->second;
    } else {
      auto it = by_address_.find(out.address);
      if (it != by_address_.end()) to = it->second;
    }
    std::string bytes;
    size_t size;
    if (options_.wire) {
      bytes = membership::EncodeMessage(out.message);
      size = bytes.size();
    } else {
      size = membership::EncodedSize(out.message);
    }
    ++n.traffic.messages;
    n.traffic.bytes += size;
    if (to < 0) continue;
    absl::Duration delay;
    if (!network_.Deliver(i, to, &prng_, &delay)) continue;
    if (Connect(i, to)) delay += network_.options().connect;
    auto d = std::make_unique<Delivery>();
    d->from = i;
    if (options_.wire) {
      d->bytes = std::move(bytes);
    } else {
      d->message = std::move(out.message);
    }
    Push(now_ + delay, to, std::move(d));
  }
  std::vector<membership::MemberEvent> events = n.m->TakeEvents();
  if (hook_) {
    for (const membership::MemberEvent& e : events) hook_(i, e);
  }
  const absl::Time next = n.m->NextDeadline();
  if (next == absl::InfiniteFuture()) return;
  const int64_t next_us = CeilUs(next);
  if (next_us < n.wake_us) {
    n.wake_us = next_us;
    Push(next, i, nullptr);
  }
}

void Simulator::RunUntil(absl::Time t) {
  const int64_t until = Us(t);
  while (!queue_.empty() && queue_.front().when_us <= until) {
    std::pop_heap(queue_.begin(), queue_.end(), std::greater<>());
    Event e = std::move(queue_.back());
    queue_.pop_back();
    now_ = absl::FromUnixMicros(e.when_us);
    ++events_processed_;
    Node& n = nodes_[e.node];
    if (!n.up) continue;
    if (e.delivery != nullptr) {
      const std::string& from = nodes_[e.delivery->from].name;
      // Rejections are counted by the node itself; nothing to do here.
      if (options_.wire) {
        (void)n.m->HandleBytes(from, e.delivery->bytes, now_);
      } else {
        (void)n.m->HandleMessage(from, e.delivery->message, now_);
      }
    } else {
      // Only the latest wake-up of a node counts.
      if (e.when_us != n.wake_us) continue;
      n.wake_us = INT64_MAX;
      n.m->Tick(now_);
    }
    AfterCall(e.node);
  }
  if (t > now_) now_ = t;
}

bool Simulator::RunUntilTrue(const std::function<bool()>& done,
                             absl::Duration step, absl::Duration limit) {
  const absl::Time end = now_ + limit;
  while (now_ < end) {
    if (done()) return true;
    RunUntil(std::min(now_ + step, end));
  }
  return done();
}

}  // namespace mycel::sim
