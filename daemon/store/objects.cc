#include "daemon/store/objects.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/log.h"
#include "runtime/status.h"

namespace mycel::store {
namespace {

constexpr char kTable[] = "objects";
constexpr absl::string_view kNodeOwnedPrefix = "node.";
constexpr size_t kMaxNamespaceBytes = 63;

constexpr char kSelectRow[] =
    "SELECT namespace, key, value, origin, seq, hlc, owner, signature FROM "
    "objects ";

Object ReadRow(const Stmt& st) {
  Object o;
  o.ns = st.ColumnText(0);
  o.key = st.ColumnText(1);
  if (!st.ColumnIsNull(2)) o.value = st.ColumnBlob(2);
  o.stamp.origin = st.ColumnText(3);
  o.stamp.seq = st.ColumnInt(4);
  o.stamp.hlc = static_cast<HlcTime>(st.ColumnInt(5));
  o.owner = st.ColumnText(6);
  if (!st.ColumnIsNull(7)) o.stamp.signature = st.ColumnBlob(7);
  return o;
}

// The change log keeps one key column: "<namespace>/<key>" (a namespace
// has no '/').
std::string LogKey(absl::string_view ns, absl::string_view key) {
  return absl::StrCat(ns, "/", key);
}

std::string Describe(absl::string_view origin, int64_t seq) {
  return absl::StrCat(origin, ":", seq);
}

}  // namespace

std::string ObjectVersion::ToString() const {
  if (seq == 0) return "none";
  return absl::StrCat(origin, ":", seq, "@", absl::Hex(hlc));
}

absl::StatusOr<ObjectVersion> ObjectVersion::Parse(absl::string_view text,
                                                   absl::string_view field) {
  if (text == "none") return ObjectVersion{};
  ObjectVersion v;
  const size_t at = text.rfind('@');
  const size_t colon = at == absl::string_view::npos ? at : text.rfind(':', at);
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(text.substr(colon + 1, at - colon - 1), &v.seq) ||
      v.seq <= 0 || !absl::SimpleHexAtoi(text.substr(at + 1), &v.hlc)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field,
                     ": want origin:seq@hlc as Get and Put return it, or "
                     "none, got \"",
                     text, "\""));
  }
  v.origin = std::string(text.substr(0, colon));
  return v;
}

namespace {

// The columns ReadLogRow reads, after "SELECT ".
constexpr char kLogColumns[] = "seq, hlc, key, value, signature";

// A change_log row of `origin` (columns kLogColumns) as the change it
// logs. DATA_LOSS when its key is not "namespace/key".
absl::StatusOr<ObjectChange> ReadLogRow(absl::string_view origin,
                                        const Stmt& st) {
  ObjectChange c;
  c.stamp.origin = std::string(origin);
  c.stamp.seq = st.ColumnInt(0);
  c.stamp.hlc = static_cast<HlcTime>(st.ColumnInt(1));
  const std::string key = st.ColumnText(2);
  const size_t slash = key.find('/');
  if (slash == std::string::npos) {
    return absl::DataLossError(
        absl::StrCat("change_log ", Describe(origin, c.stamp.seq), ": key \"",
                     key, "\" is not namespace/key"));
  }
  c.ns = key.substr(0, slash);
  c.key = key.substr(slash + 1);
  if (!st.ColumnIsNull(3)) c.value = st.ColumnBlob(3);
  if (!st.ColumnIsNull(4)) c.stamp.signature = st.ColumnBlob(4);
  return c;
}

// Whether (hlc, origin) of `a` is later than that of `b`: the merge rule.
bool Wins(const ChangeStamp& a, const ChangeStamp& b) {
  return std::tie(a.hlc, a.origin) > std::tie(b.hlc, b.origin);
}

void BindSignature(Stmt& st, int index, const std::string& signature) {
  if (signature.empty()) {
    st.BindNull(index);
  } else {
    st.BindBlob(index, signature);
  }
}

absl::Status Upsert(Transaction& tx, absl::string_view ns,
                    absl::string_view key,
                    const std::optional<std::string>& value,
                    const ChangeStamp& stamp, absl::string_view owner) {
  return tx.Execute(
      "INSERT INTO objects(namespace, key, value, origin, seq, hlc, owner, "
      "signature) VALUES(?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(namespace, key) "
      "DO UPDATE SET value=excluded.value, origin=excluded.origin, "
      "seq=excluded.seq, hlc=excluded.hlc, owner=excluded.owner, "
      "signature=excluded.signature",
      [&](Stmt& st) {
        st.Bind(1, ns).Bind(2, key);
        if (value.has_value()) {
          st.BindBlob(3, *value);
        } else {
          st.BindNull(3);
        }
        st.Bind(4, stamp.origin)
            .Bind(5, stamp.seq)
            .Bind(6, static_cast<int64_t>(stamp.hlc))
            .Bind(7, owner);
        BindSignature(st, 8, stamp.signature);
      });
}

absl::Status AppendLog(Transaction& tx, const ObjectChange& c) {
  return tx.Execute(
      "INSERT INTO change_log(origin, seq, hlc, tbl, key, value, signature) "
      "VALUES(?, ?, ?, ?, ?, ?, ?)",
      [&](Stmt& st) {
        st.Bind(1, c.stamp.origin)
            .Bind(2, c.stamp.seq)
            .Bind(3, static_cast<int64_t>(c.stamp.hlc))
            .Bind(4, kTable)
            .Bind(5, LogKey(c.ns, c.key));
        if (c.value.has_value()) {
          st.BindBlob(6, *c.value);
        } else {
          st.BindNull(6);
        }
        BindSignature(st, 7, c.stamp.signature);
      });
}

absl::Status SetVersion(Transaction& tx, absl::string_view origin,
                        int64_t seq) {
  return tx.Execute(
      "INSERT INTO replica_versions(origin, seq) VALUES(?, ?) "
      "ON CONFLICT(origin) DO UPDATE SET seq=max(seq, excluded.seq)",
      [&](Stmt& st) { st.Bind(1, origin).Bind(2, seq); });
}

absl::StatusOr<std::optional<Object>> Current(Transaction& tx,
                                              absl::string_view ns,
                                              absl::string_view key) {
  std::optional<Object> out;
  RETURN_IF_ERROR(tx.Query(
      absl::StrCat(kSelectRow, "WHERE namespace=? AND key=?"),
      [&](Stmt& st) { st.Bind(1, ns).Bind(2, key); },
      [&](const Stmt& st) {
        out = ReadRow(st);
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<VersionVector> ReadVector(Transaction& tx, bool floors) {
  VersionVector v;
  RETURN_IF_ERROR(tx.Query(
      floors ? "SELECT origin, floor FROM replica_versions"
             : "SELECT origin, seq FROM replica_versions",
      [](Stmt&) {},
      [&](const Stmt& st) {
        v[st.ColumnText(0)] = st.ColumnInt(1);
        return absl::OkStatus();
      }));
  return v;
}

}  // namespace

absl::StatusOr<std::string> ObjectStore::OwnerOf(absl::string_view ns,
                                                 absl::string_view key) {
  if (!absl::StartsWith(ns, kNodeOwnedPrefix)) return std::string();
  std::string owner(key.substr(0, key.find('/')));
  if (owner.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key: \"", key, "\" in node-owned namespace ", ns,
                     " must start with the name of the node that owns it"));
  }
  return owner;
}

absl::Status ObjectStore::Validate(
    absl::string_view ns, absl::string_view key,
    const std::optional<std::string>& value) const {
  if (ns.empty() || ns.size() > kMaxNamespaceBytes) {
    return absl::InvalidArgumentError(absl::StrCat("namespace: must be 1 to ",
                                                   kMaxNamespaceBytes,
                                                   " bytes, not ", ns.size()));
  }
  for (size_t i = 0; i < ns.size(); ++i) {
    const char c = ns[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    (i > 0 && (c == '.' || c == '-' || c == '_'));
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("namespace: \"", ns,
                       "\" may hold only a-z, 0-9 and (not first) . - _"));
    }
  }
  if (key.empty() || key.size() > options_.max_key_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("key: must be 1 to ",
                                                   options_.max_key_bytes,
                                                   " bytes, not ", key.size()));
  }
  if (key.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError("key: must not contain a NUL byte");
  }
  if (value.has_value() && value->size() > options_.max_value_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("value: ", value->size(), " bytes is over the limit of ",
                     options_.max_value_bytes, " for ", ns, "/", key));
  }
  return OwnerOf(ns, key).status();
}

size_t ObjectStore::SizeOf(const ObjectChange& c) {
  // The fixed part stands for the seq, time and framing.
  return 24 + c.stamp.origin.size() + c.ns.size() + c.key.size() +
         (c.value.has_value() ? c.value->size() : 0) + c.stamp.signature.size();
}

std::string ObjectStore::SigningBytes(const ObjectChange& c) {
  return ChangeSigningBytes(c.stamp, kTable, LogKey(c.ns, c.key), c.value);
}

absl::StatusOr<int64_t> ObjectStore::SignOwnUnsigned() {
  // Read, sign outside the lock, then write what is still unsigned.
  std::vector<ObjectChange> unsigned_changes;
  RETURN_IF_ERROR(store_->Query(
      absl::StrCat("SELECT ", kLogColumns,
                   " FROM change_log WHERE origin=? AND tbl='objects' AND "
                   "signature IS NULL ORDER BY seq"),
      [&](Stmt& st) { st.Bind(1, origin()); },
      [&](const Stmt& st) -> absl::Status {
        ASSIGN_OR_RETURN(ObjectChange c, ReadLogRow(origin(), st));
        unsigned_changes.push_back(std::move(c));
        return absl::OkStatus();
      }));
  // Rows whose log entry garbage collection took.
  std::set<int64_t> from_log;
  for (const ObjectChange& c : unsigned_changes) from_log.insert(c.stamp.seq);
  RETURN_IF_ERROR(store_->Query(
      absl::StrCat(kSelectRow, "WHERE origin=? AND signature IS NULL"),
      [&](Stmt& st) { st.Bind(1, origin()); },
      [&](const Stmt& st) {
        Object o = ReadRow(st);
        if (!from_log.contains(o.stamp.seq)) {
          unsigned_changes.push_back({o.stamp, o.ns, o.key, o.value});
        }
        return absl::OkStatus();
      }));
  for (ObjectChange& c : unsigned_changes) {
    std::optional<absl::StatusOr<std::string>> signature =
        store_->SignChange(c.stamp, kTable, LogKey(c.ns, c.key), c.value);
    if (!signature.has_value()) {
      return absl::FailedPreconditionError(
          "sign this node's changes: the store has no signer");
    }
    if (!signature->ok()) return signature->status();
    c.stamp.signature = **std::move(signature);
  }
  if (unsigned_changes.empty()) return 0;
  RETURN_IF_ERROR(
      store_->InReplicatedTransaction([&](Transaction& tx) -> absl::Status {
        for (const ObjectChange& c : unsigned_changes) {
          RETURN_IF_ERROR(tx.Execute(
              "UPDATE change_log SET signature=? WHERE origin=? AND seq=? AND "
              "signature IS NULL",
              [&](Stmt& st) {
                st.BindBlob(1, c.stamp.signature)
                    .Bind(2, c.stamp.origin)
                    .Bind(3, c.stamp.seq);
              }));
          // The object still holds this change only if nothing replaced it.
          RETURN_IF_ERROR(tx.Execute(
              "UPDATE objects SET signature=? WHERE namespace=? AND key=? AND "
              "origin=? AND seq=? AND signature IS NULL",
              [&](Stmt& st) {
                st.BindBlob(1, c.stamp.signature)
                    .Bind(2, c.ns)
                    .Bind(3, c.key)
                    .Bind(4, c.stamp.origin)
                    .Bind(5, c.stamp.seq);
              }));
        }
        return absl::OkStatus();
      }));
  return static_cast<int64_t>(unsigned_changes.size());
}

absl::StatusOr<Object> ObjectStore::Get(absl::string_view ns,
                                        absl::string_view key) {
  std::optional<Object> out;
  RETURN_IF_ERROR(store_->Query(
      absl::StrCat(kSelectRow,
                   "WHERE namespace=? AND key=? AND value IS NOT NULL"),
      [&](Stmt& st) { st.Bind(1, ns).Bind(2, key); },
      [&](const Stmt& st) {
        out = ReadRow(st);
        return absl::OkStatus();
      }));
  if (!out.has_value()) {
    return absl::NotFoundError(absl::StrCat("object ", ns, "/", key));
  }
  return *std::move(out);
}

absl::StatusOr<std::vector<Object>> ObjectStore::List(
    absl::string_view ns, absl::string_view prefix) {
  std::vector<Object> out;
  RETURN_IF_ERROR(store_->Query(
      absl::StrCat(kSelectRow,
                   "WHERE namespace=? AND value IS NOT NULL AND "
                   "substr(key, 1, length(?2))=?2 ORDER BY key"),
      [&](Stmt& st) { st.Bind(1, ns).Bind(2, prefix); },
      [&](const Stmt& st) {
        out.push_back(ReadRow(st));
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<std::vector<Object>> ObjectStore::Dump() {
  std::vector<Object> out;
  RETURN_IF_ERROR(store_->Query(
      absl::StrCat(kSelectRow, "ORDER BY namespace, key"), [](Stmt&) {},
      [&](const Stmt& st) {
        out.push_back(ReadRow(st));
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<ObjectStore::PreparedWrite> ObjectStore::PrepareWrite(
    absl::string_view ns, absl::string_view key,
    std::optional<absl::string_view> value,
    std::optional<ObjectVersion> if_version) const {
  PreparedWrite w;
  w.change.ns = std::string(ns);
  w.change.key = std::string(key);
  if (value.has_value()) w.change.value = std::string(*value);
  RETURN_IF_ERROR(Validate(ns, key, w.change.value));
  ASSIGN_OR_RETURN(w.owner, OwnerOf(ns, key));
  if (!w.owner.empty() && w.owner != OriginNode(origin())) {
    return absl::PermissionDeniedError(
        absl::StrCat("object ", ns, "/", key, " belongs to node ", w.owner,
                     "; only it may change it, not ", origin()));
  }
  w.if_version = std::move(if_version);
  return w;
}

absl::Status ObjectStore::ApplyWrite(Transaction& tx, const ChangeStamp& stamp,
                                     const PreparedWrite& w) {
  const std::string& ns = w.change.ns;
  const std::string& key = w.change.key;
  if (w.if_version.has_value()) {
    ASSIGN_OR_RETURN(std::optional<Object> now, Current(tx, ns, key));
    ObjectVersion held;
    if (now.has_value() && now->value.has_value()) {
      held = ObjectVersion::Of(now->stamp);
    }
    if (!(held == *w.if_version)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "object ", ns, "/", key, " is at version ",
          held.seq == 0 ? "none (absent)" : held.ToString(),
          ", not the expected ",
          w.if_version->seq == 0 ? "none (absent)" : w.if_version->ToString()));
    }
  }
  RETURN_IF_ERROR(Upsert(tx, ns, key, w.change.value, stamp, w.owner));
  return SetVersion(tx, stamp.origin, stamp.seq);
}

absl::StatusOr<ObjectChange> ObjectStore::Write(
    absl::string_view ns, absl::string_view key,
    std::optional<absl::string_view> value,
    std::optional<ObjectVersion> if_version) {
  ASSIGN_OR_RETURN(PreparedWrite w,
                   PrepareWrite(ns, key, value, std::move(if_version)));
  ASSIGN_OR_RETURN(
      w.change.stamp,
      store_->WriteReplicated(
          {.table = kTable, .key = LogKey(ns, key), .value = w.change.value},
          [&w](Transaction& tx, const ChangeStamp& stamp) {
            return ApplyWrite(tx, stamp, w);
          }));
  if (listener_) listener_(w.change);
  return std::move(w.change);
}

void ObjectStore::WriteAsync(absl::string_view ns, absl::string_view key,
                             std::optional<absl::string_view> value,
                             std::optional<ObjectVersion> if_version,
                             WriteDone done) {
  absl::StatusOr<PreparedWrite> prepared =
      PrepareWrite(ns, key, value, std::move(if_version));
  if (!prepared.ok()) {
    std::move(done)(prepared.status());
    return;
  }
  // Shared by the statements and the answer, which both run on the
  // committer thread, one after the other (or the answer alone, on this
  // thread, when the store refuses the write: closing, or its queue full).
  auto w = std::make_shared<PreparedWrite>(*std::move(prepared));
  ReplicatedChange change{
      .table = kTable, .key = LogKey(ns, key), .value = w->change.value};
  store_->SubmitReplicated(
      std::move(change),
      [w](Transaction& tx, const ChangeStamp& stamp) {
        return ApplyWrite(tx, stamp, *w);
      },
      [this, w,
       done = std::move(done)](absl::StatusOr<ChangeStamp> stamp) mutable {
        if (!stamp.ok()) {
          std::move(done)(stamp.status());
          return;
        }
        w->change.stamp = *std::move(stamp);
        if (listener_) listener_(w->change);
        std::move(done)(std::move(w->change));
      });
}

absl::StatusOr<ApplyResult> ObjectStore::ApplyRemote(const ObjectChange& c,
                                                     absl::string_view sender) {
  if (c.stamp.origin.empty()) {
    return absl::InvalidArgumentError("origin: empty");
  }
  if (c.stamp.seq <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq: ", c.stamp.seq, " from origin ", c.stamp.origin,
                     " (sequences start at 1)"));
  }
  RETURN_IF_ERROR(Validate(c.ns, c.key, c.value));
  ASSIGN_OR_RETURN(std::string owner, OwnerOf(c.ns, c.key));
  if (!owner.empty() && owner != OriginNode(c.stamp.origin)) {
    log::Warn("replication: refused a change to another node's object",
              {{"object", LogKey(c.ns, c.key)},
               {"owner", owner},
               {"origin", c.stamp.origin},
               {"sender", sender}});
    return absl::PermissionDeniedError(
        absl::StrCat("object ", c.ns, "/", c.key, " belongs to node ", owner,
                     "; refused change ", Describe(c.stamp.origin, c.stamp.seq),
                     " sent by ", sender));
  }
  // Checked before the transaction, which it would hold up. The Replicator
  // passes only changes past what it holds, so copies already held are not
  // checked again.
  if (verifier_) {
    if (absl::Status v = verifier_(c, SigningBytes(c)); !v.ok()) {
      if (!absl::IsUnavailable(v)) {
        log::Warn("replication: refused a change its origin did not sign",
                  {{"change", Describe(c.stamp.origin, c.stamp.seq)},
                   {"object", LogKey(c.ns, c.key)},
                   {"sender", sender},
                   {"error", v}});
      }
      return Annotate(
          v, absl::StrCat("change ", Describe(c.stamp.origin, c.stamp.seq),
                          " sent by ", sender));
    }
  }
  ApplyResult result = ApplyResult::kApplied;
  absl::Status s =
      store_->InReplicatedTransaction([&](Transaction& tx) -> absl::Status {
        int64_t held = 0;
        RETURN_IF_ERROR(tx.Query(
            "SELECT seq FROM replica_versions WHERE origin=?",
            [&](Stmt& st) { st.Bind(1, c.stamp.origin); },
            [&](const Stmt& st) {
              held = st.ColumnInt(0);
              return absl::OkStatus();
            }));
        if (c.stamp.seq <= held) {
          result = ApplyResult::kDuplicate;
          return absl::OkStatus();
        }
        if (c.stamp.seq != held + 1) {
          return absl::FailedPreconditionError(
              absl::StrCat("change ", Describe(c.stamp.origin, c.stamp.seq),
                           ": seq is not the next of its origin (", held + 1,
                           "); the ones between are missing"));
        }
        absl::StatusOr<HlcTime> received =
            store_->ReceiveHlc(c.stamp.hlc, options_.max_offset);
        if (!received.ok()) {
          log::Warn("replication: refused a change stamped in the future",
                    {{"change", Describe(c.stamp.origin, c.stamp.seq)},
                     {"sender", sender},
                     {"error", received.status()}});
          return Annotate(
              received.status(),
              absl::StrCat("change ", Describe(c.stamp.origin, c.stamp.seq),
                           " sent by ", sender));
        }
        ASSIGN_OR_RETURN(std::optional<Object> now, Current(tx, c.ns, c.key));
        if (!now.has_value() || Wins(c.stamp, now->stamp)) {
          RETURN_IF_ERROR(Upsert(tx, c.ns, c.key, c.value, c.stamp, owner));
        } else {
          result = ApplyResult::kLost;
        }
        RETURN_IF_ERROR(AppendLog(tx, c));
        // A change of this node that a peer holds and this database lost
        // (restored from an older copy): taken back, signed by this node's
        // key like any other, and this node's next change goes past it.
        if (c.stamp.origin == origin()) tx.TakeBackOwnSequence(c.stamp.seq);
        return SetVersion(tx, c.stamp.origin, c.stamp.seq);
      });
  RETURN_IF_ERROR(s);
  if (result == ApplyResult::kApplied && remote_listener_) remote_listener_(c);
  return result;
}

absl::StatusOr<VersionVector> ObjectStore::Versions() {
  VersionVector v;
  RETURN_IF_ERROR(store_->InTransaction([&](Transaction& tx) -> absl::Status {
    ASSIGN_OR_RETURN(v, ReadVector(tx, false));
    return absl::OkStatus();
  }));
  return v;
}

absl::Status ObjectStore::RememberOriginCertificate(absl::string_view origin,
                                                    absl::string_view der) {
  if (origin.empty() || der.empty()) {
    return absl::InvalidArgumentError(
        "origin certificate: origin and der must not be empty");
  }
  return store_->Execute(
      "INSERT INTO origin_certificates(origin, der) VALUES(?, ?) "
      "ON CONFLICT(origin) DO UPDATE SET der=excluded.der "
      "WHERE der IS NOT excluded.der",
      [&](Stmt& st) { st.Bind(1, origin).BindBlob(2, der); });
}

absl::StatusOr<std::string> ObjectStore::OriginCertificate(
    absl::string_view origin) {
  std::string der;
  RETURN_IF_ERROR(store_->Query(
      "SELECT der FROM origin_certificates WHERE origin=?",
      [&](Stmt& st) { st.Bind(1, origin); },
      [&](const Stmt& st) {
        der = st.ColumnBlob(0);
        return absl::OkStatus();
      }));
  return der;
}

absl::StatusOr<VersionVector> ObjectStore::Floors() {
  VersionVector v;
  RETURN_IF_ERROR(store_->InTransaction([&](Transaction& tx) -> absl::Status {
    ASSIGN_OR_RETURN(v, ReadVector(tx, true));
    return absl::OkStatus();
  }));
  return v;
}

absl::StatusOr<ChangeBatch> ObjectStore::ReadChanges(absl::string_view origin,
                                                     int64_t after,
                                                     size_t max_bytes) {
  ChangeBatch batch;
  int64_t floor = 0;
  int64_t last = 0;
  absl::Status s = store_->InTransaction([&](Transaction& tx) -> absl::Status {
    RETURN_IF_ERROR(tx.Query(
        "SELECT floor, seq FROM replica_versions WHERE origin=?",
        [&](Stmt& st) { st.Bind(1, origin); },
        [&](const Stmt& st) {
          floor = st.ColumnInt(0);
          last = st.ColumnInt(1);
          return absl::OkStatus();
        }));
    if (after < floor) {
      return absl::OutOfRangeError(
          absl::StrCat("changes of origin ", origin, " after seq ", after,
                       " were compacted (the log holds them after seq ", floor,
                       "): resync in full"));
    }
    return tx.Query(
        absl::StrCat("SELECT ", kLogColumns,
                     " FROM change_log WHERE origin=? AND seq>? AND "
                     "tbl='objects' ORDER BY seq"),
        [&](Stmt& st) { st.Bind(1, origin).Bind(2, after); },
        [&](const Stmt& st) -> absl::Status {
          ASSIGN_OR_RETURN(ObjectChange c, ReadLogRow(origin, st));
          const size_t size = SizeOf(c);
          if (!batch.changes.empty() && batch.bytes + size > max_bytes) {
            return absl::CancelledError("chunk full");  // stops the query
          }
          batch.bytes += size;
          batch.changes.push_back(std::move(c));
          return absl::OkStatus();
        });
  });
  if (!s.ok() && !absl::IsCancelled(s)) return s;
  batch.more = !batch.changes.empty() && batch.changes.back().stamp.seq < last;
  return batch;
}

absl::StatusOr<SnapshotChunk> ObjectStore::ReadSnapshot(
    const std::pair<std::string, std::string>& after, size_t max_bytes) {
  SnapshotChunk chunk;
  chunk.after = after;
  chunk.done = true;
  absl::Status s = store_->InTransaction([&](Transaction& tx) -> absl::Status {
    ASSIGN_OR_RETURN(chunk.versions, ReadVector(tx, false));
    if (after == std::pair<std::string, std::string>()) {
      // Each origin's change at the seq the vector names, signed by it: what
      // lets the receiver take the vector as true (FinishResync).
      for (const auto& entry : chunk.versions) {
        const std::string& origin = entry.first;  // captured below
        const int64_t seq = entry.second;
        RETURN_IF_ERROR(tx.Query(
            absl::StrCat("SELECT ", kLogColumns,
                         " FROM change_log WHERE origin=? AND seq=? AND "
                         "tbl='objects'"),
            [&](Stmt& st) { st.Bind(1, origin).Bind(2, seq); },
            [&](const Stmt& st) -> absl::Status {
              ASSIGN_OR_RETURN(ObjectChange c, ReadLogRow(origin, st));
              chunk.bytes += SizeOf(c);
              chunk.proofs.push_back(std::move(c));
              return absl::OkStatus();
            }));
      }
    }
    return tx.Query(
        absl::StrCat(kSelectRow,
                     "WHERE (namespace, key) > (?, ?) ORDER BY namespace, key"),
        [&](Stmt& st) { st.Bind(1, after.first).Bind(2, after.second); },
        [&](const Stmt& st) -> absl::Status {
          Object o = ReadRow(st);
          const size_t size = SizeOf({o.stamp, o.ns, o.key, o.value});
          if (!chunk.rows.empty() && chunk.bytes + size > max_bytes) {
            chunk.done = false;
            return absl::CancelledError("chunk full");
          }
          chunk.bytes += size;
          chunk.last = {o.ns, o.key};
          chunk.rows.push_back(std::move(o));
          return absl::OkStatus();
        });
  });
  if (!s.ok() && !absl::IsCancelled(s)) return s;
  return chunk;
}

absl::StatusOr<size_t> ObjectStore::ApplySnapshot(const SnapshotChunk& chunk,
                                                  absl::string_view sender,
                                                  size_t max_refused,
                                                  HlcTime remove_before) {
  for (const Object& o : chunk.rows) {
    RETURN_IF_ERROR(Validate(o.ns, o.key, o.value));
  }
  // Rows whose origin did not sign them are left out; a row whose origin's
  // key is not known yet fails the chunk, so that the resync is not taken
  // as whole without it.
  std::vector<bool> forged(chunk.rows.size(), false);
  size_t refused = 0;
  if (verifier_) {
    for (size_t i = 0; i < chunk.rows.size(); ++i) {
      const Object& o = chunk.rows[i];
      const ObjectChange c{o.stamp, o.ns, o.key, o.value};
      absl::Status v = verifier_(c, SigningBytes(c));
      if (absl::IsUnavailable(v)) {
        return Annotate(v, absl::StrCat("snapshot row ", LogKey(o.ns, o.key),
                                        " sent by ", sender));
      }
      if (v.GetPayload(kRefusedOriginPayload).has_value()) {
        forged[i] = true;  // skipped; not the sender's doing
        continue;
      }
      if (!v.ok()) {
        if (++refused > max_refused) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "snapshot chunk sent by ", sender, ": more than ", max_refused,
              " rows their origin did not sign; dropped"));
        }
        log::Warn("replication: snapshot row its origin did not sign skipped",
                  {{"object", LogKey(o.ns, o.key)},
                   {"origin", o.stamp.origin},
                   {"sender", sender},
                   {"error", v}});
        forged[i] = true;
      }
    }
  }
  std::vector<ObjectChange> won;
  size_t skipped = 0;
  size_t kept_young = 0;
  absl::Status s = store_->InReplicatedTransaction([&](Transaction& tx)
                                                       -> absl::Status {
    won.clear();  // a retried transaction starts over
    skipped = 0;
    kept_young = 0;
    // Ours in the range that the sender no longer has, though it saw them:
    // superseded there, and their successors collected.
    std::vector<Object> ours;
    RETURN_IF_ERROR(tx.Query(
        absl::StrCat(kSelectRow, chunk.done ? "WHERE (namespace, key) > (?, ?)"
                                            : "WHERE (namespace, key) > (?, ?) "
                                              "AND (namespace, key) <= (?, ?)"),
        [&](Stmt& st) {
          st.Bind(1, chunk.after.first).Bind(2, chunk.after.second);
          if (!chunk.done)
            st.Bind(3, chunk.last.first).Bind(4, chunk.last.second);
        },
        [&](const Stmt& st) {
          ours.push_back(ReadRow(st));
          return absl::OkStatus();
        }));
    std::map<std::pair<std::string, std::string>, const Object*> theirs;
    for (const Object& o : chunk.rows) theirs[{o.ns, o.key}] = &o;
    for (const Object& o : ours) {
      if (theirs.contains({o.ns, o.key})) continue;
      if (o.stamp.seq > SeqAt(chunk.versions, o.stamp.origin)) continue;
      if (o.stamp.hlc >= remove_before) {
        ++kept_young;
        continue;
      }
      RETURN_IF_ERROR(
          tx.Execute("DELETE FROM objects WHERE namespace=? AND key=?",
                     [&](Stmt& st) { st.Bind(1, o.ns).Bind(2, o.key); }));
    }
    for (size_t i = 0; i < chunk.rows.size(); ++i) {
      const Object& o = chunk.rows[i];
      if (forged[i]) continue;
      ASSIGN_OR_RETURN(std::string owner, OwnerOf(o.ns, o.key));
      if (!owner.empty() && owner != OriginNode(o.stamp.origin)) {
        log::Warn("replication: snapshot row of another node's object skipped",
                  {{"object", LogKey(o.ns, o.key)},
                   {"origin", o.stamp.origin},
                   {"sender", sender}});
        ++skipped;
        continue;
      }
      absl::StatusOr<HlcTime> received =
          store_->ReceiveHlc(o.stamp.hlc, options_.max_offset);
      if (!received.ok()) {
        log::Warn("replication: snapshot row stamped in the future skipped",
                  {{"object", LogKey(o.ns, o.key)},
                   {"sender", sender},
                   {"error", received.status()}});
        continue;
      }
      ASSIGN_OR_RETURN(std::optional<Object> now, Current(tx, o.ns, o.key));
      if (!now.has_value() || Wins(o.stamp, now->stamp)) {
        RETURN_IF_ERROR(Upsert(tx, o.ns, o.key, o.value, o.stamp, owner));
        won.push_back({o.stamp, o.ns, o.key, o.value});
      }
    }
    return absl::OkStatus();
  });
  RETURN_IF_ERROR(s);
  if (kept_young > 0) {
    // No honest resync asks this: a row written lately was not collected
    // while this node was away.
    log::Warn("replication: a snapshot would remove rows written lately; kept",
              {{"sender", sender}, {"rows", static_cast<int64_t>(kept_young)}});
  }
  if (remote_listener_) {
    for (const ObjectChange& c : won) remote_listener_(c);
  }
  return refused + skipped;
}

absl::Status ObjectStore::FinishResync(const VersionVector& base,
                                       const std::vector<ObjectChange>& proofs,
                                       absl::string_view sender) {
  // The vector is the sender's word; an origin's change at that seq, signed
  // by the origin, is proof. Without it, this node would take as held (and
  // then drop as duplicates) changes the origin never made.
  VersionVector proven;
  std::vector<const ObjectChange*> logged;
  // One proof checked per origin: a sender repeating one costs no more.
  std::set<std::string> tried;
  for (const ObjectChange& c : proofs) {
    auto it = base.find(c.stamp.origin);
    if (it == base.end() || c.stamp.seq != it->second) continue;
    if (!tried.insert(c.stamp.origin).second) continue;
    RETURN_IF_ERROR(Validate(c.ns, c.key, c.value));
    if (verifier_) {
      absl::Status v = verifier_(c, SigningBytes(c));
      if (absl::IsUnavailable(v)) {
        return Annotate(v, absl::StrCat("resync from ", sender));
      }
      if (!v.ok()) {
        log::Warn("replication: a resync's proof its origin did not sign",
                  {{"change", Describe(c.stamp.origin, c.stamp.seq)},
                   {"sender", sender},
                   {"error", v}});
        continue;
      }
    }
    proven[c.stamp.origin] = c.stamp.seq;
    logged.push_back(&c);
  }
  return store_->InReplicatedTransaction([&](Transaction& tx) -> absl::Status {
    ASSIGN_OR_RETURN(VersionVector held, ReadVector(tx, false));
    for (const auto& entry : base) {
      // Named copies: a lambda below captures them (clang 14 cannot capture
      // a structured binding).
      const auto& origin = entry.first;
      const auto seq = entry.second;
      if (seq <= SeqAt(held, origin)) continue;
      if (SeqAt(proven, origin) != seq) {
        log::Warn("replication: a resync claims changes it cannot prove",
                  {{"origin", origin},
                   {"claimed", seq},
                   {"held", SeqAt(held, origin)},
                   {"sender", sender}});
        continue;
      }
      RETURN_IF_ERROR(tx.Execute(
          "INSERT INTO replica_versions(origin, seq, floor) VALUES(?1, ?2, ?3) "
          "ON CONFLICT(origin) DO UPDATE SET seq=?2, floor=max(floor, ?3)",
          [&](Stmt& st) { st.Bind(1, origin).Bind(2, seq).Bind(3, seq - 1); }));
      // Changes of this node that its database lost (restored from an
      // older copy) and peers hold: its next change goes past them.
      if (origin == this->origin()) {
        log::Warn("replication: a resync brought back changes of this node",
                  {{"held", SeqAt(held, origin)}, {"now", seq}});
        tx.TakeBackOwnSequence(seq);
      }
    }
    // The proofs join the log: this node can prove its vector in turn.
    for (const ObjectChange* c : logged) {
      if (SeqAt(held, c->stamp.origin) >= c->stamp.seq) continue;
      RETURN_IF_ERROR(AppendLog(tx, *c));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<GcResult> ObjectStore::CollectGarbage(
    const VersionVector& seen_by_all, HlcTime cutoff) {
  GcResult result;
  RETURN_IF_ERROR(
      store_->InReplicatedTransaction([&](Transaction& tx) -> absl::Status {
        ASSIGN_OR_RETURN(VersionVector held, ReadVector(tx, false));
        for (const auto& entry : held) {
          const auto& origin = entry.first;  // captured below
          const auto last = entry.second;
          const int64_t seen = std::min(SeqAt(seen_by_all, origin), last);
          RETURN_IF_ERROR(tx.Query(
              "SELECT count(*) FROM objects WHERE value IS NULL AND origin=? "
              "AND (seq<=? OR hlc<?)",
              [&](Stmt& st) {
                st.Bind(1, origin).Bind(2, seen).Bind(
                    3, static_cast<int64_t>(cutoff));
              },
              [&](const Stmt& st) {
                result.tombstones += st.ColumnInt(0);
                return absl::OkStatus();
              }));
          RETURN_IF_ERROR(tx.Execute(
              "DELETE FROM objects WHERE value IS NULL AND origin=? AND "
              "(seq<=? OR hlc<?)",
              [&](Stmt& st) {
                st.Bind(1, origin).Bind(2, seen).Bind(
                    3, static_cast<int64_t>(cutoff));
              }));
          // An origin's times rise with its sequence, so what is collected
          // is a prefix of its log; its last entry stays (it carries the
          // origin's last seq and the highest time across restarts).
          int64_t upto = 0;
          RETURN_IF_ERROR(tx.Query(
              "SELECT coalesce(max(seq), 0) FROM change_log WHERE origin=?1 "
              "AND seq<?2 AND (seq<=?3 OR hlc<?4)",
              [&](Stmt& st) {
                st.Bind(1, origin).Bind(2, last).Bind(3, seen).Bind(
                    4, static_cast<int64_t>(cutoff));
              },
              [&](const Stmt& st) {
                upto = st.ColumnInt(0);
                return absl::OkStatus();
              }));
          if (upto == 0) continue;
          RETURN_IF_ERROR(tx.Query(
              "SELECT count(*) FROM change_log WHERE origin=? AND seq<=?",
              [&](Stmt& st) { st.Bind(1, origin).Bind(2, upto); },
              [&](const Stmt& st) {
                result.log_changes += st.ColumnInt(0);
                return absl::OkStatus();
              }));
          RETURN_IF_ERROR(
              tx.Execute("DELETE FROM change_log WHERE origin=? AND seq<=?",
                         [&](Stmt& st) { st.Bind(1, origin).Bind(2, upto); }));
          RETURN_IF_ERROR(tx.Execute(
              "UPDATE replica_versions SET floor=max(floor, ?) WHERE origin=?",
              [&](Stmt& st) { st.Bind(1, upto).Bind(2, origin); }));
        }
        return absl::OkStatus();
      }));
  return result;
}

int64_t SeqAt(const VersionVector& v, absl::string_view origin) {
  auto it = v.find(origin);
  return it == v.end() ? 0 : it->second;
}

}  // namespace mycel::store
