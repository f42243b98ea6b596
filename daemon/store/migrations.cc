// The schema, as a sequence of forward migrations. Never edit a migration
// that has shipped; add a new one.
#include "daemon/store/store.h"

namespace mycel::store {
namespace {

constexpr Migration kMigrations[] = {
    {1, R"sql(
CREATE TABLE meta (
  key   TEXT PRIMARY KEY NOT NULL,
  value TEXT NOT NULL
) STRICT;
-- One row per daemon start, newest last: when, which version, which pid.
CREATE TABLE boots (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  started_at INTEGER NOT NULL,          -- unix seconds
  version    TEXT NOT NULL,
  pid        INTEGER NOT NULL
) STRICT;
)sql"},
    {2, R"sql(
-- Cells and executables. Spec and status are protobuf messages
-- (mycel.v1.CellSpec, ExecutableSpec, ExecutableStatus); the columns beside
-- them are what queries and adoption after a restart need.
CREATE TABLE cells (
  name            TEXT PRIMARY KEY NOT NULL,
  spec            BLOB NOT NULL,
  created_us      INTEGER NOT NULL,
  init_pid        INTEGER NOT NULL DEFAULT 0,
  init_start_time INTEGER NOT NULL DEFAULT 0    -- clock ticks since boot
) STRICT;
CREATE TABLE executables (
  cell        TEXT NOT NULL REFERENCES cells(name) ON DELETE CASCADE,
  name        TEXT NOT NULL,
  spec        BLOB NOT NULL,
  status      BLOB NOT NULL,
  pid         INTEGER NOT NULL DEFAULT 0,
  start_time  INTEGER NOT NULL DEFAULT 0,       -- clock ticks since boot
  PRIMARY KEY (cell, name)
) STRICT;
)sql"},
    {3, R"sql(
-- A throwaway cell of Cells.Run: removed when the daemon starts again,
-- because the client that streamed its output is gone by then.
ALTER TABLE cells ADD COLUMN ephemeral INTEGER NOT NULL DEFAULT 0;
)sql"},
    {4, R"sql(
-- Every change to a replicated table (daemon/store/tables.cc), written in
-- the same transaction as the change itself by Store::WriteReplicated:
-- which node made it (origin), its place in that node's gap-free
-- sequence, its hybrid logical clock time (daemon/store/hlc.h), and the
-- key and new value (NULL: deleted). Replication sends a peer the rows it
-- lacks, by origin and sequence.
CREATE TABLE change_log (
  origin TEXT NOT NULL,
  seq    INTEGER NOT NULL,
  hlc    INTEGER NOT NULL,
  tbl    TEXT NOT NULL,
  key    TEXT NOT NULL,
  value  BLOB,
  PRIMARY KEY (origin, seq)
) STRICT, WITHOUT ROWID;
-- The highest time is where this node's clock starts after a restart.
CREATE INDEX change_log_hlc ON change_log(hlc);
)sql"},
    {5, R"sql(
-- This node's membership of a mesh (mesh/identity): at most one row. The
-- keys and certificates are files under <state-dir>/mesh/; this says which
-- mesh, under which name, and whether the node holds the CA key.
-- Node-local until the replicated store carries the mesh's shared state.
CREATE TABLE mesh (
  one        INTEGER PRIMARY KEY CHECK (one = 1),
  name       TEXT NOT NULL,
  node       TEXT NOT NULL,
  authority  INTEGER NOT NULL,
  joined_us  INTEGER NOT NULL
) STRICT;
-- Join tokens this node issued: never the secret, only its SHA-256.
CREATE TABLE join_tokens (
  id          TEXT PRIMARY KEY NOT NULL,
  secret_hash TEXT NOT NULL,
  created_us  INTEGER NOT NULL,
  expires_us  INTEGER NOT NULL,
  uses_left   INTEGER NOT NULL,
  revoked     INTEGER NOT NULL DEFAULT 0
) STRICT;
-- The revocation list (mesh/pki/revocation_list.h, its binary form): one
-- row.
CREATE TABLE revocations (
  one   INTEGER PRIMARY KEY CHECK (one = 1),
  list  BLOB NOT NULL
) STRICT;
)sql"},
    {6, R"sql(
-- The mesh members this node knows (mesh/membership/member_store.cc), so
-- that a restarted node rejoins without a seed. Node-local: each node's own
-- view, never replicated. `record` is the member's signed alive record
-- (mycel.v1.GossipAlive); state is 1 alive, 2 suspect, 3 dead, 4 left.
-- This node's own incarnation and its seeds are in meta.
CREATE TABLE members (
  name           TEXT PRIMARY KEY NOT NULL,
  state          INTEGER NOT NULL,
  incarnation    INTEGER NOT NULL,
  record         BLOB NOT NULL,
  state_since_us INTEGER NOT NULL,
  last_heard_us  INTEGER              -- NULL: never heard from directly
) STRICT, WITHOUT ROWID;
)sql"},
    {7, R"sql(
-- Objects: the mesh's shared state, keys in namespaces
-- (daemon/store/objects.h). A row is the change that wins its key, last
-- writer wins on (hlc, origin), with that change's stamp; a NULL value is
-- a tombstone (the key was deleted), kept until garbage-collected. `owner`
-- is empty for a shared object, else the one node that may change it.
CREATE TABLE objects (
  namespace TEXT NOT NULL,
  key       TEXT NOT NULL,
  value     BLOB,
  origin    TEXT NOT NULL,
  seq       INTEGER NOT NULL,
  hlc       INTEGER NOT NULL,
  owner     TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (namespace, key)
) STRICT, WITHOUT ROWID;
CREATE INDEX objects_tombstones ON objects(hlc) WHERE value IS NULL;
-- This node's version vector: per origin, the highest sequence applied
-- with none missing below it; and the floor, at or below which the change
-- log may lack that origin's changes (compacted, or skipped by a full
-- resync), so that a peer behind it must resync in full.
CREATE TABLE replica_versions (
  origin TEXT PRIMARY KEY NOT NULL,
  seq    INTEGER NOT NULL,
  floor  INTEGER NOT NULL DEFAULT 0
) STRICT, WITHOUT ROWID;
)sql"},
    {8, R"sql(
-- Join tokens that admit authorities (`mycel mesh token create
-- --authority`): only those may give a joining node the CA key.
ALTER TABLE join_tokens ADD COLUMN authority INTEGER NOT NULL DEFAULT 0;
-- The other nodes of the mesh this node knows directly: those it admitted
-- (with the serial it issued them), and the authorities it learnt of when
-- it joined. Revocations are pushed to them; a join sent to a node that is
-- not an authority is answered with the authorities listed here.
CREATE TABLE mesh_peers (
  name        TEXT PRIMARY KEY NOT NULL,
  address     TEXT NOT NULL,
  authority   INTEGER NOT NULL,
  serial      TEXT NOT NULL DEFAULT '',
  admitted_us INTEGER NOT NULL
) STRICT;
)sql"},
    {9, R"sql(
-- The user key/value namespace ("kv" objects, daemon/store/state_store.h)
-- as a stream of changes for State.Watch: each kv key that changed, once,
-- at the node-local revision of its latest change (AUTOINCREMENT, so that
-- a revision is never reused). Triggers keep it, so changes of every path
-- (local writes, changes received, snapshot rows) are seen alike; a watch
-- reads the key's current row, so changes to one key between two reads
-- coalesce into the latest. Node-local: revisions are this node's own.
CREATE TABLE kv_changes (
  revision INTEGER PRIMARY KEY AUTOINCREMENT,
  key      TEXT NOT NULL UNIQUE
) STRICT;
-- The highest revision whose change is gone: the key's tombstone was
-- collected, so a watch resuming from below it could miss a delete.
CREATE TABLE kv_floor (
  one      INTEGER PRIMARY KEY CHECK (one = 1),
  revision INTEGER NOT NULL
) STRICT;
CREATE TRIGGER kv_changes_insert AFTER INSERT ON objects
WHEN new.namespace = 'kv' BEGIN
  DELETE FROM kv_changes WHERE key = new.key;
  INSERT INTO kv_changes(key) VALUES (new.key);
END;
CREATE TRIGGER kv_changes_update AFTER UPDATE ON objects
WHEN new.namespace = 'kv' BEGIN
  DELETE FROM kv_changes WHERE key = new.key;
  INSERT INTO kv_changes(key) VALUES (new.key);
END;
-- A live row removed (a full resync found it superseded and collected).
CREATE TRIGGER kv_changes_delete AFTER DELETE ON objects
WHEN old.namespace = 'kv' AND old.value IS NOT NULL BEGIN
  DELETE FROM kv_changes WHERE key = old.key;
  INSERT INTO kv_changes(key) VALUES (old.key);
END;
-- A tombstone collected: its delete can no longer be told.
CREATE TRIGGER kv_changes_collect AFTER DELETE ON objects
WHEN old.namespace = 'kv' AND old.value IS NULL BEGIN
  INSERT INTO kv_floor(one, revision)
    SELECT 1, revision FROM kv_changes WHERE key = old.key
    ON CONFLICT(one) DO UPDATE SET revision = max(revision, excluded.revision);
  DELETE FROM kv_changes WHERE key = old.key;
END;
)sql"},
    {10, R"sql(
-- Each change carries its origin's signature over ChangeSigningBytes
-- (daemon/store/store.h), in the log and on the object row it wrote, so
-- that a relay or a snapshot can prove who made it. NULL: written before
-- the origin had a mesh key.
ALTER TABLE change_log ADD COLUMN signature BLOB;
ALTER TABLE objects ADD COLUMN signature BLOB;
-- Signing an old row is not a change of its key: the kv stream ignores it.
DROP TRIGGER kv_changes_update;
CREATE TRIGGER kv_changes_update
AFTER UPDATE OF namespace, key, value, origin, seq, hlc ON objects
WHEN new.namespace = 'kv' BEGIN
  DELETE FROM kv_changes WHERE key = new.key;
  INSERT INTO kv_changes(key) VALUES (new.key);
END;
)sql"},
    {11, R"sql(
-- The certificate this node checked each origin's changes with. Membership
-- forgets a member a day after it left; this keeps the certificate, so that
-- the node can still check that origin's changes, and hand the certificate
-- to a peer that never knew the origin (docs/replication.md). Node-local.
CREATE TABLE origin_certificates (
  origin TEXT PRIMARY KEY,
  der    BLOB NOT NULL
) STRICT;
)sql"},
};

}  // namespace

std::span<const Migration> BuiltinMigrations() { return kMigrations; }

}  // namespace mycel::store
