#include "mesh/identity/mesh_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/status.h"

namespace mycel::identity {

using store::Stmt;

absl::StatusOr<std::optional<MeshRow>> MeshStore::GetMesh() {
  std::optional<MeshRow> out;
  RETURN_IF_ERROR(store_->Query(
      "SELECT name, node, authority, joined_us FROM mesh WHERE one=1",
      [](Stmt&) {},
      [&](const Stmt& st) {
        MeshRow r;
        r.name = st.ColumnText(0);
        r.node = st.ColumnText(1);
        r.authority = st.ColumnInt(2) != 0;
        r.joined = absl::FromUnixMicros(st.ColumnInt(3));
        out = std::move(r);
        return absl::OkStatus();
      }));
  return out;
}

absl::Status MeshStore::InsertMesh(const MeshRow& row) {
  absl::Status s = store_->Execute(
      "INSERT INTO mesh(one, name, node, authority, joined_us) "
      "VALUES(1,?,?,?,?)",
      [&](Stmt& st) {
        st.Bind(1, row.name)
            .Bind(2, row.node)
            .Bind(3, int64_t{row.authority})
            .Bind(4, absl::ToUnixMicros(row.joined));
      });
  if (s.code() == absl::StatusCode::kAlreadyExists) {
    return absl::AlreadyExistsError("this node is already in a mesh");
  }
  return s;
}

namespace {

// Inserts `t` through `db`, the Store or a Transaction (both Execute).
template <typename Db>
absl::Status InsertTokenRow(Db& db, const pki::StoredJoinToken& t) {
  return db.Execute(
      "INSERT INTO join_tokens(id, secret_hash, created_us, expires_us, "
      "uses_left, revoked, authority) VALUES(?,?,?,?,?,?,?)",
      [&](Stmt& st) {
        st.Bind(1, t.id)
            .Bind(2, t.secret_hash)
            .Bind(3, absl::ToUnixMicros(t.created))
            .Bind(4, absl::ToUnixMicros(t.expires))
            .Bind(5, t.uses_left)
            .Bind(6, int64_t{t.revoked})
            .Bind(7, int64_t{t.authority});
      });
}

}  // namespace

absl::Status MeshStore::InsertToken(const pki::StoredJoinToken& t) {
  return InsertTokenRow(*store_, t);
}

namespace {

pki::StoredJoinToken TokenFromRow(const Stmt& st) {
  pki::StoredJoinToken t;
  t.id = st.ColumnText(0);
  t.secret_hash = st.ColumnText(1);
  t.created = absl::FromUnixMicros(st.ColumnInt(2));
  t.expires = absl::FromUnixMicros(st.ColumnInt(3));
  t.uses_left = st.ColumnInt(4);
  t.revoked = st.ColumnInt(5) != 0;
  t.authority = st.ColumnInt(6) != 0;
  return t;
}

}  // namespace

absl::StatusOr<pki::StoredJoinToken> MeshStore::GetToken(
    const std::string& id) {
  std::optional<pki::StoredJoinToken> out;
  RETURN_IF_ERROR(store_->Query(
      "SELECT id, secret_hash, created_us, expires_us, uses_left, revoked, "
      "authority "
      "FROM join_tokens WHERE id=?",
      [&](Stmt& st) { st.Bind(1, id); },
      [&](const Stmt& st) {
        out = TokenFromRow(st);
        return absl::OkStatus();
      }));
  if (!out.has_value()) {
    return absl::NotFoundError(
        absl::StrCat("join token ", id, " does not exist"));
  }
  return *std::move(out);
}

absl::StatusOr<std::vector<pki::StoredJoinToken>> MeshStore::ListTokens() {
  std::vector<pki::StoredJoinToken> out;
  RETURN_IF_ERROR(store_->Query(
      "SELECT id, secret_hash, created_us, expires_us, uses_left, revoked, "
      "authority "
      "FROM join_tokens ORDER BY created_us, id",
      [](Stmt&) {},
      [&](const Stmt& st) {
        out.push_back(TokenFromRow(st));
        return absl::OkStatus();
      }));
  return out;
}

absl::Status MeshStore::RevokeToken(const std::string& id) {
  // Looked up first, so that an unknown id is NOT_FOUND.
  RETURN_IF_ERROR(GetToken(id).status());
  return store_->Execute("UPDATE join_tokens SET revoked=1 WHERE id=?",
                         [&](Stmt& st) { st.Bind(1, id); });
}

absl::StatusOr<std::vector<std::string>> MeshStore::DeleteTokensExpiredBefore(
    absl::Time before) {
  std::vector<std::string> ids;
  RETURN_IF_ERROR(
      store_->InTransaction([&](store::Transaction& tx) -> absl::Status {
        const int64_t us = absl::ToUnixMicros(before);
        RETURN_IF_ERROR(tx.Query(
            "SELECT id FROM join_tokens WHERE expires_us<? ORDER BY id",
            [&](Stmt& st) { st.Bind(1, us); },
            [&](const Stmt& st) {
              ids.push_back(st.ColumnText(0));
              return absl::OkStatus();
            }));
        return tx.Execute("DELETE FROM join_tokens WHERE expires_us<?",
                          [&](Stmt& st) { st.Bind(1, us); });
      }));
  return ids;
}

absl::StatusOr<bool> MeshStore::MergeToken(const pki::StoredJoinToken& t) {
  bool changed = false;
  RETURN_IF_ERROR(store_->InTransaction([&](store::Transaction& tx)
                                            -> absl::Status {
    std::optional<pki::StoredJoinToken> held;
    RETURN_IF_ERROR(tx.Query(
        "SELECT id, secret_hash, created_us, expires_us, uses_left, revoked, "
        "authority FROM join_tokens WHERE id=?",
        [&](Stmt& st) { st.Bind(1, t.id); },
        [&](const Stmt& st) {
          held = TokenFromRow(st);
          return absl::OkStatus();
        }));
    if (!held.has_value()) {
      changed = true;
      return InsertTokenRow(tx, t);
    }
    if (held->secret_hash != t.secret_hash) {
      return absl::InvalidArgumentError(absl::StrCat(
          "join token ", t.id, ": another secret than the one held here"));
    }
    const int64_t left = std::min(held->uses_left, t.uses_left);
    const bool revoked = held->revoked || t.revoked;
    if (left == held->uses_left && revoked == held->revoked) {
      return absl::OkStatus();
    }
    changed = true;
    return tx.Execute(
        "UPDATE join_tokens SET uses_left=?, revoked=? WHERE id=?",
        [&](Stmt& st) {
          st.Bind(1, left).Bind(2, int64_t{revoked}).Bind(3, t.id);
        });
  }));
  return changed;
}

absl::Status MeshStore::ConsumeToken(const std::string& id) {
  return store_->InTransaction([&](store::Transaction& tx) -> absl::Status {
    int64_t left = -1;
    RETURN_IF_ERROR(tx.Query(
        "SELECT uses_left FROM join_tokens WHERE id=?",
        [&](Stmt& st) { st.Bind(1, id); },
        [&](const Stmt& st) {
          left = st.ColumnInt(0);
          return absl::OkStatus();
        }));
    if (left < 1) {
      return absl::UnauthenticatedError(
          absl::StrCat("join token ", id, ": used up"));
    }
    return tx.Execute("UPDATE join_tokens SET uses_left=uses_left-1 WHERE id=?",
                      [&](Stmt& st) { st.Bind(1, id); });
  });
}

absl::Status MeshStore::PutPeer(const PeerRow& p) {
  return store_->Execute(
      "INSERT INTO mesh_peers(name, address, authority, serial, admitted_us) "
      "VALUES(?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET "
      "address=excluded.address, authority=excluded.authority, "
      "serial=excluded.serial, admitted_us=excluded.admitted_us",
      [&](Stmt& st) {
        st.Bind(1, p.name)
            .Bind(2, p.address)
            .Bind(3, int64_t{p.authority})
            .Bind(4, p.serial)
            .Bind(5, absl::ToUnixMicros(p.admitted));
      });
}

namespace {

PeerRow PeerFromRow(const Stmt& st) {
  PeerRow p;
  p.name = st.ColumnText(0);
  p.address = st.ColumnText(1);
  p.authority = st.ColumnInt(2) != 0;
  p.serial = st.ColumnText(3);
  p.admitted = absl::FromUnixMicros(st.ColumnInt(4));
  return p;
}

}  // namespace

absl::StatusOr<std::optional<PeerRow>> MeshStore::GetPeer(
    const std::string& name) {
  std::optional<PeerRow> out;
  RETURN_IF_ERROR(store_->Query(
      "SELECT name, address, authority, serial, admitted_us FROM mesh_peers "
      "WHERE name=?",
      [&](Stmt& st) { st.Bind(1, name); },
      [&](const Stmt& st) {
        out = PeerFromRow(st);
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<std::vector<PeerRow>> MeshStore::ListPeers() {
  std::vector<PeerRow> out;
  RETURN_IF_ERROR(store_->Query(
      "SELECT name, address, authority, serial, admitted_us FROM mesh_peers "
      "ORDER BY name",
      [](Stmt&) {},
      [&](const Stmt& st) {
        out.push_back(PeerFromRow(st));
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<pki::RevocationList> MeshStore::GetRevocations() {
  std::optional<std::string> blob;
  RETURN_IF_ERROR(store_->Query(
      "SELECT list FROM revocations WHERE one=1", [](Stmt&) {},
      [&](const Stmt& st) {
        blob = st.ColumnBlob(0);
        return absl::OkStatus();
      }));
  if (!blob.has_value()) return pki::RevocationList();
  absl::StatusOr<pki::RevocationList> list = pki::RevocationList::Parse(*blob);
  if (!list.ok()) {
    return absl::DataLossError(
        absl::StrCat("revocations: ", list.status().message()));
  }
  return list;
}

absl::Status MeshStore::PutRevocations(const pki::RevocationList& list) {
  return store_->Execute(
      "INSERT INTO revocations(one, list) VALUES(1,?) ON CONFLICT(one) DO "
      "UPDATE SET list=excluded.list",
      [&](Stmt& st) { st.BindBlob(1, list.Serialize()); });
}

}  // namespace mycel::identity
