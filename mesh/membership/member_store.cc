#include "mesh/membership/member_store.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "mesh/membership/codec.h"
#include "runtime/log.h"
#include "runtime/status.h"

namespace mycel::membership {
namespace {

using store::Stmt;

constexpr char kIncarnationKey[] = "membership.incarnation";
constexpr char kSeedsKey[] = "membership.seeds";

constexpr char kUpsertMember[] =
    "INSERT INTO members(name, state, incarnation, record, state_since_us, "
    "last_heard_us) VALUES(?,?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET "
    "state=excluded.state, incarnation=excluded.incarnation, "
    "record=excluded.record, state_since_us=excluded.state_since_us, "
    "last_heard_us=excluded.last_heard_us";
constexpr char kDeleteMember[] = "DELETE FROM members WHERE name=?";
constexpr char kSetMeta[] =
    "INSERT INTO meta(key, value) VALUES(?,?) ON CONFLICT(key) DO UPDATE SET "
    "value=excluded.value";
constexpr char kGetMeta[] = "SELECT key, value FROM meta WHERE key IN (?,?)";
constexpr char kLoadMembers[] =
    "SELECT name, state, incarnation, record, state_since_us, last_heard_us "
    "FROM members ORDER BY name";

// Times are stored as unix microseconds; the infinite past (never) as NULL
// for last_heard and as INT64_MIN for state_since.
int64_t ToUs(absl::Time t) {
  return t == absl::InfinitePast() ? INT64_MIN : absl::ToUnixMicros(t);
}
absl::Time FromUs(int64_t us) {
  return us == INT64_MIN ? absl::InfinitePast() : absl::FromUnixMicros(us);
}

std::optional<MemberState> StateFromInt(int64_t v) {
  switch (v) {
    case 1:
      return MemberState::kAlive;
    case 2:
      return MemberState::kSuspect;
    case 3:
      return MemberState::kDead;
    case 4:
      return MemberState::kLeft;
    default:
      return std::nullopt;
  }
}

}  // namespace

uint64_t StartIncarnation(std::optional<uint64_t> persisted, absl::Time now) {
  const int64_t wall_us = std::max<int64_t>(0, absl::ToUnixMicros(now));
  uint64_t inc = static_cast<uint64_t>(wall_us);
  if (persisted.has_value() && *persisted + 1 > inc) inc = *persisted + 1;
  return inc;
}

absl::StatusOr<PersistedMembership> MemberStore::Load() {
  PersistedMembership out;
  RETURN_IF_ERROR(store_->Query(
      kGetMeta,
      [](Stmt& st) { st.Bind(1, kIncarnationKey).Bind(2, kSeedsKey); },
      [&](const Stmt& st) {
        const std::string key = st.ColumnText(0);
        const std::string value = st.ColumnText(1);
        if (key == kIncarnationKey) {
          uint64_t inc = 0;
          if (absl::SimpleAtoi(value, &inc)) {
            out.incarnation = inc;
          } else {
            log::Error("membership store: bad incarnation, ignored",
                       {{"value", value}});
          }
        } else {
          for (absl::string_view s :
               absl::StrSplit(value, '\n', absl::SkipEmpty())) {
            out.seeds.emplace_back(s);
          }
        }
        return absl::OkStatus();
      }));
  RETURN_IF_ERROR(store_->Query(
      kLoadMembers, [](Stmt&) {},
      [&](const Stmt& st) {
        const std::string name = st.ColumnText(0);
        auto skip = [&](absl::string_view why) {
          ++out.skipped;
          log::Error("membership store: unreadable member row skipped",
                     {{"member", name}, {"why", why}});
          return absl::OkStatus();
        };
        const std::optional<MemberState> state = StateFromInt(st.ColumnInt(1));
        if (!state.has_value()) {
          return skip(absl::StrCat("unknown state ", st.ColumnInt(1)));
        }
        absl::StatusOr<Alive> alive = DecodeAlive(st.ColumnBlob(3));
        if (!alive.ok()) return skip(alive.status().ToString());
        if (alive->name != name) {
          return skip(absl::StrCat("its record names \"", alive->name, "\""));
        }
        MemberSnapshot m;
        m.name = name;
        m.state = *state;
        m.incarnation = std::max(static_cast<uint64_t>(st.ColumnInt(2)),
                                 alive->incarnation);
        m.record = std::make_shared<const Alive>(*std::move(alive));
        m.state_since = FromUs(st.ColumnInt(4));
        m.last_heard =
            st.ColumnIsNull(5) ? absl::InfinitePast() : FromUs(st.ColumnInt(5));
        out.members.push_back(std::move(m));
        return absl::OkStatus();
      }));
  return out;
}

absl::Status MemberStore::Save(const MemberStoreBatch& batch) {
  return store_->InTransaction([&](store::Transaction& tx) -> absl::Status {
    for (const MemberSnapshot& m : batch.upserts) {
      if (m.record == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("member \"", m.name, "\" has no record"));
      }
      const std::string record = EncodeAlive(*m.record);
      RETURN_IF_ERROR(tx.Execute(kUpsertMember, [&](Stmt& st) {
        st.Bind(1, m.name)
            .Bind(2, static_cast<int64_t>(m.state))
            .Bind(3, static_cast<int64_t>(m.incarnation))
            .BindBlob(4, record)
            .Bind(5, ToUs(m.state_since));
        if (m.last_heard == absl::InfinitePast()) {
          st.BindNull(6);
        } else {
          st.Bind(6, ToUs(m.last_heard));
        }
      }));
    }
    for (const std::string& name : batch.removed) {
      RETURN_IF_ERROR(
          tx.Execute(kDeleteMember, [&](Stmt& st) { st.Bind(1, name); }));
    }
    if (batch.incarnation.has_value()) {
      const std::string value = absl::StrCat(*batch.incarnation);
      RETURN_IF_ERROR(tx.Execute(kSetMeta, [&](Stmt& st) {
        st.Bind(1, kIncarnationKey).Bind(2, value);
      }));
    }
    if (batch.seeds.has_value()) {
      const std::string value = absl::StrJoin(*batch.seeds, "\n");
      RETURN_IF_ERROR(tx.Execute(
          kSetMeta, [&](Stmt& st) { st.Bind(1, kSeedsKey).Bind(2, value); }));
    }
    return absl::OkStatus();
  });
}

absl::Status MemberStore::Restore(absl::Time now, MembershipOptions* options) {
  ASSIGN_OR_RETURN(PersistedMembership p, Load());
  options->incarnation =
      std::max(options->incarnation, StartIncarnation(p.incarnation, now));
  options->members = std::move(p.members);
  if (options->seeds.empty()) options->seeds = std::move(p.seeds);
  return absl::OkStatus();
}

}  // namespace mycel::membership
