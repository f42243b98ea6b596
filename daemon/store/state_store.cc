#include "daemon/store/state_store.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/status.h"

namespace mycel::store {
namespace {

// The revision counter and the floor, in one row.
constexpr char kRevisions[] =
    "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE "
    "name='kv_changes'), 0), coalesce((SELECT revision FROM kv_floor), 0)";

Object ReadObject(const Stmt& st, int col) {
  Object o;
  o.ns = std::string(kStateNamespace);
  o.key = st.ColumnText(col);
  if (!st.ColumnIsNull(col + 1)) o.value = st.ColumnBlob(col + 1);
  o.stamp.origin = st.ColumnText(col + 2);
  o.stamp.seq = st.ColumnInt(col + 3);
  o.stamp.hlc = static_cast<HlcTime>(st.ColumnInt(col + 4));
  return o;
}

absl::Status ReadRevisions(Transaction& tx, int64_t* latest, int64_t* floor) {
  return tx.Query(
      kRevisions, [](Stmt&) {},
      [&](const Stmt& st) {
        *latest = st.ColumnInt(0);
        *floor = st.ColumnInt(1);
        return absl::OkStatus();
      });
}

}  // namespace

absl::StatusOr<Object> StateStore::Get(absl::string_view key) {
  return objects_->Get(kStateNamespace, key);
}

absl::StatusOr<std::optional<int64_t>> StateStore::OverQuota() {
  if (quota_bytes_ <= 0) return std::nullopt;
  ASSIGN_OR_RETURN(const int64_t used, store_->UsedBytes());
  if (used < quota_bytes_) return std::nullopt;
  return used;
}

absl::Status StateStore::QuotaError(int64_t used, absl::string_view what) {
  refused_over_quota_.fetch_add(1);
  constexpr double kMiB = 1 << 20;
  return absl::ResourceExhaustedError(absl::StrFormat(
      "state_quota: the state database holds %.1f MiB, and %s at %.1f MiB; "
      "delete keys (their space is reused once the deletes are collected) or "
      "raise state_quota",
      static_cast<double>(used) / kMiB, what,
      static_cast<double>(quota_bytes_) / kMiB));
}

absl::Status StateStore::CheckPut() {
  ASSIGN_OR_RETURN(const std::optional<int64_t> over, OverQuota());
  if (!over.has_value()) return absl::OkStatus();
  return QuotaError(*over, "puts stop");
}

absl::Status StateStore::CheckDelete(absl::string_view key) {
  ASSIGN_OR_RETURN(const std::optional<int64_t> over, OverQuota());
  if (!over.has_value()) return absl::OkStatus();
  // A delete frees its value's space once collected; one of a key with no
  // value here would only add a tombstone (and its change), which every
  // node keeps until it is collected.
  absl::StatusOr<Object> now = objects_->Get(kStateNamespace, key);
  if (now.ok() && now->value.has_value()) return absl::OkStatus();
  if (!now.ok() && !absl::IsNotFound(now.status())) return now.status();
  return QuotaError(*over,
                    "deletes of keys that hold no value here (which would "
                    "only add a tombstone) stop");
}

absl::StatusOr<ObjectChange> StateStore::Put(
    absl::string_view key, absl::string_view value,
    std::optional<ObjectVersion> if_version) {
  RETURN_IF_ERROR(CheckPut());
  return objects_->Write(kStateNamespace, key, value, std::move(if_version));
}

absl::StatusOr<ObjectChange> StateStore::Delete(absl::string_view key) {
  RETURN_IF_ERROR(CheckDelete(key));
  return objects_->Write(kStateNamespace, key, std::nullopt);
}

void StateStore::PutAsync(absl::string_view key, absl::string_view value,
                          std::optional<ObjectVersion> if_version,
                          ObjectStore::WriteDone done) {
  if (absl::Status quota = CheckPut(); !quota.ok()) {
    std::move(done)(quota);
    return;
  }
  objects_->WriteAsync(kStateNamespace, key, value, std::move(if_version),
                       std::move(done));
}

void StateStore::DeleteAsync(absl::string_view key,
                             ObjectStore::WriteDone done) {
  if (absl::Status quota = CheckDelete(key); !quota.ok()) {
    std::move(done)(quota);
    return;
  }
  objects_->WriteAsync(kStateNamespace, key, std::nullopt, std::nullopt,
                       std::move(done));
}

absl::StatusOr<StatePage> StateStore::List(absl::string_view prefix,
                                           absl::string_view after, int limit) {
  StatePage page;
  int64_t floor = 0;
  RETURN_IF_ERROR(store_->InTransaction([&](Transaction& tx) -> absl::Status {
    RETURN_IF_ERROR(ReadRevisions(tx, &page.revision, &floor));
    return tx.Query(
        "SELECT key, value, origin, seq, hlc FROM objects WHERE namespace=?1 "
        "AND value IS NOT NULL AND key>?2 AND substr(key, 1, length(?3))=?3 "
        "ORDER BY key LIMIT ?4",
        [&](Stmt& st) {
          st.Bind(1, kStateNamespace)
              .Bind(2, after)
              .Bind(3, prefix)
              .Bind(4, static_cast<int64_t>(limit));
        },
        [&](const Stmt& st) {
          page.objects.push_back(ReadObject(st, 0));
          return absl::OkStatus();
        });
  }));
  if (limit > 0 && page.objects.size() == static_cast<size_t>(limit)) {
    page.next_after = page.objects.back().key;
  }
  return page;
}

absl::StatusOr<int64_t> StateStore::Revision() {
  int64_t latest = 0;
  RETURN_IF_ERROR(store_->Query(
      kRevisions, [](Stmt&) {},
      [&](const Stmt& st) {
        latest = st.ColumnInt(0);
        return absl::OkStatus();
      }));
  return latest;
}

absl::StatusOr<StateChanges> StateStore::ChangesSince(absl::string_view prefix,
                                                      int64_t after,
                                                      int limit) {
  StateChanges out;
  out.revision = after;
  RETURN_IF_ERROR(store_->InTransaction([&](Transaction& tx) -> absl::Status {
    int64_t latest = 0;
    int64_t floor = 0;
    RETURN_IF_ERROR(ReadRevisions(tx, &latest, &floor));
    if (after < floor) {
      return absl::OutOfRangeError(absl::StrCat(
          "revision ", after, " was compacted (deletes up to revision ", floor,
          " were collected): list again and watch from the listing's "
          "revision"));
    }
    if (after > latest) {
      return absl::OutOfRangeError(
          absl::StrCat("revision ", after, " is ahead of this node's latest (",
                       latest, "); revisions are node-local"));
    }
    bool full = false;
    RETURN_IF_ERROR(tx.Query(
        "SELECT c.revision, c.key, o.key, o.value, o.origin, o.seq, o.hlc "
        "FROM kv_changes c LEFT JOIN objects o ON o.namespace=?1 AND "
        "o.key=c.key WHERE c.revision>?2 AND substr(c.key, 1, length(?3))=?3 "
        "ORDER BY c.revision LIMIT ?4",
        [&](Stmt& st) {
          st.Bind(1, kStateNamespace)
              .Bind(2, after)
              .Bind(3, prefix)
              .Bind(4, static_cast<int64_t>(limit));
        },
        [&](const Stmt& st) {
          StateChange c;
          c.revision = st.ColumnInt(0);
          c.key = st.ColumnText(1);
          if (!st.ColumnIsNull(2)) c.object = ReadObject(st, 2);
          out.revision = c.revision;
          out.changes.push_back(std::move(c));
          return absl::OkStatus();
        }));
    full = limit > 0 && out.changes.size() == static_cast<size_t>(limit);
    // Changes of other prefixes do not stop a watcher at its old revision.
    if (!full) out.revision = latest;
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace mycel::store
