// Store: myceld's SQLite state database, and the one way into it.
//
// One file, <state-dir>/mycel.db, in WAL mode with a busy timeout and
// foreign keys on. The schema is versioned with PRAGMA user_version and
// migrated forward at open, one transaction per migration. A database whose
// version is newer than this binary knows is refused rather than touched.
//
// Nothing outside daemon/store and the subsystems' store files (such as
// cells/cell_store.cc) holds SQL or a SQLite handle: they run fixed
// statements through Execute, Query and InTransaction, which bind and read
// through Stmt. Every table is declared node-local or replicated in
// daemon/store/tables.cc; a replicated table is written only through
// WriteReplicated, which stamps the change (origin, per-origin sequence,
// hybrid logical clock) and records it in the change log in the same
// transaction. SQLite's authorizer refuses any other write to one.
#ifndef MYCEL_DAEMON_STORE_STORE_H_
#define MYCEL_DAEMON_STORE_STORE_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/store/hlc.h"
#include "daemon/store/sqlite.h"
#include "daemon/store/tables.h"
#include "runtime/clock.h"

namespace mycel::store {

// One forward migration. `version` is the schema version after it runs;
// versions are consecutive from 1.
struct Migration {
  int version;
  absl::string_view sql;
};

// The migrations this binary ships, in order.
std::span<const Migration> BuiltinMigrations();

// A change to a replicated table: which table, which key, and the value
// (nullopt: the key was deleted), as the change log records it.
struct ReplicatedChange {
  std::string table;
  std::string key;
  std::optional<std::string> value;
};

// A change's origin names the node that made it: the node's name, or
// NAME~KEYID for a node admitted again under the name of a revoked one, so
// that its changes never take the numbers its predecessor's hold (KEYID is
// its certificate's pki::Certificate::KeyId; docs/replication.md,
// "Origins"). Node names cannot hold '~'.
inline constexpr char kOriginKeySeparator = '~';
// The node an origin names: its name, without a key id.
inline absl::string_view OriginNode(absl::string_view origin) {
  return origin.substr(0, origin.find(kOriginKeySeparator));
}
// The key id an origin names, or "" for a plain node name.
inline absl::string_view OriginKeyId(absl::string_view origin) {
  const size_t at = origin.find(kOriginKeySeparator);
  return at == absl::string_view::npos ? absl::string_view()
                                       : origin.substr(at + 1);
}

// Where a change to replicated state comes from and when: its origin node,
// its place in that origin's sequence (1, 2, ... with no gap), and its
// hybrid logical clock time.
//
// `signature` proves the origin made it: its node key's signature over
// ChangeSigningBytes. Empty where the origin had no key when it wrote (a
// node not in a mesh yet); such changes do not leave the node until it
// signs them (ObjectStore::SignOwnUnsigned).
struct ChangeStamp {
  std::string origin;
  int64_t seq = 0;
  HlcTime hlc = 0;
  std::string signature;

  friend bool operator==(const ChangeStamp&, const ChangeStamp&) = default;
};

// The exact bytes an origin signs for a change: a domain tag, then the
// origin, seq, time, table, key and value (or its absence), each with an
// explicit length. The one definition: signers and verifiers both call it.
std::string ChangeSigningBytes(const ChangeStamp& stamp,
                               absl::string_view table, absl::string_view key,
                               const std::optional<std::string>& value);

// Signs the bytes of a change of this node (ChangeSigningBytes) with its
// node key.
using ChangeSigner =
    std::function<absl::StatusOr<std::string>(absl::string_view bytes)>;

class Store;

// The statements of one transaction (see Store::InTransaction). Valid only
// inside the function it is given to.
class Transaction {
 public:
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  // As Store::Execute and Store::Query, inside the transaction.
  absl::Status Execute(absl::string_view sql,
                       absl::FunctionRef<void(Stmt&)> bind);
  absl::Status Execute(absl::string_view sql) {
    return Execute(sql, [](Stmt&) {});
  }
  absl::Status Query(absl::string_view sql, absl::FunctionRef<void(Stmt&)> bind,
                     absl::FunctionRef<absl::Status(const Stmt&)> row);

  // In a transaction of InReplicatedTransaction that logs a change of this
  // node taken back from a peer (this node's database had lost it): this
  // node's next own change is stamped past `seq`. Undone if the
  // transaction is.
  void TakeBackOwnSequence(int64_t seq);

 private:
  friend class Store;
  Transaction(Store* store, bool replicated)
      : store_(store), replicated_(replicated) {}
  Store* const store_;
  // Statements of WriteReplicated may write replicated tables.
  const bool replicated_;
};

// Thread-safe: one connection, used under one mutex.
class Store {
 public:
  struct Options {
    // Migrations to apply; empty means BuiltinMigrations().
    std::span<const Migration> migrations;
    // The tables they make; empty means BuiltinTables(). A table not
    // declared is a schema error (tests check the built-in ones).
    std::span<const TableInfo> tables;
    // Run PRAGMA quick_check at open and refuse a damaged database.
    bool integrity_check = true;
    // This node, as the origin of the changes it stamps.
    std::string origin = "local";
    // The clock of the hybrid logical clock (only Now is used); null: the
    // wall clock.
    const Clock* clock = nullptr;
    // PRAGMA synchronous=FULL instead of NORMAL: a commit syncs the WAL
    // before it returns, so that it survives a power loss too (NORMAL
    // survives a crash of the process, not of the machine).
    bool synchronous_full = false;
    // Writes queued for the group commit at most; past it a write fails at
    // once with RESOURCE_EXHAUSTED (a client with too many puts in flight
    // gets back-pressure, not a daemon that grows without bound).
    size_t max_queued_writes = 10000;
    // And at most this many bytes of their keys and values (1 MiB values
    // would make 10,000 writes 10 GiB); a write alone in the queue is
    // always taken.
    size_t max_queued_bytes = 64 << 20;
    // The SQLite VFS to open the database with, by name; empty: SQLite's
    // default. Tests use it to simulate a power loss
    // (tests/testing/power_loss_vfs.h).
    std::string vfs;
  };

  // Opens the database at `path` and migrates it. Only where no file
  // exists is a new database made (whole, under a temporary name, then
  // renamed into place); an existing file that is empty or not a database
  // is refused and left as it is. The database and the files beside it
  // are made private (0600) when they are not, with a log line.
  // Errors name the path and what went wrong:
  //  - FAILED_PRECONDITION when the schema is newer than the binary knows
  //    ("schema version 7 is newer than this myceld supports (3)"), or the
  //    path is not a regular file;
  //  - DATA_LOSS when the file is empty, is not a database or fails its
  //    check;
  //  - PERMISSION_DENIED when it cannot be opened or written.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path,
                                                     Options options);
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path) {
    return Open(path, Options{});
  }

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  ~Store();

  const std::string& path() const { return path_; }
  int schema_version() const { return schema_version_; }

  // Runs one statement that returns no rows: `sql` is a fixed text (never
  // one built from data), prepared once and kept, so that a statement run
  // on every request skips SQLite's parser and code generator; `bind`
  // sets its parameters. Not from inside InTransaction (use the
  // Transaction): the lock is not reentrant.
  absl::Status Execute(absl::string_view sql,
                       absl::FunctionRef<void(Stmt&)> bind)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Execute(absl::string_view sql) ABSL_LOCKS_EXCLUDED(mu_) {
    return Execute(sql, [](Stmt&) {});
  }
  // Runs a query; `row` is called for each row, and an error from it stops
  // the query and is returned.
  absl::Status Query(absl::string_view sql, absl::FunctionRef<void(Stmt&)> bind,
                     absl::FunctionRef<absl::Status(const Stmt&)> row)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `fn` inside BEGIN IMMEDIATE ... COMMIT, rolling back when it
  // returns an error (which is returned).
  absl::Status InTransaction(absl::FunctionRef<absl::Status(Transaction&)> fn)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The one write path of replicated tables. In one transaction: takes the
  // next stamp of this node (origin, sequence, HLC), runs `apply` with it
  // (which writes `change.table` itself), and appends the change to the
  // change log. INVALID_ARGUMENT when `change.table` is not a declared
  // replicated table. Returns the stamp.
  //
  // Group commit: writes are queued, and one committer thread, started by
  // the first write, commits all that wait in one transaction, each in its
  // own savepoint (an error rolls back that write alone, and takes no
  // sequence number). So concurrent writers share a commit and, with
  // synchronous=FULL, its fsync. `apply` runs on the committer thread; the
  // call returns once the commit that holds it is durable. FAILED_PRECONDITION
  // when called on the committer thread (from a `done` of SubmitReplicated),
  // where it would wait for itself; RESOURCE_EXHAUSTED when the queue is
  // full, as for SubmitReplicated.
  absl::StatusOr<ChangeStamp> WriteReplicated(
      const ReplicatedChange& change,
      absl::FunctionRef<absl::Status(Transaction&, const ChangeStamp&)> apply)
      ABSL_LOCKS_EXCLUDED(mu_, queue_mu_);

  // WriteReplicated without waiting: queues the write, and the committer
  // thread calls `done` with its result once the commit that holds it is
  // durable (or has failed). A commit holds at most kMaxBatch writes. When
  // the queue holds Options::max_queued_writes, or this write would take it
  // past Options::max_queued_bytes, `done` gets RESOURCE_EXHAUSTED at once,
  // on this thread. `done` runs on the committer
  // thread and holds up the next commit while it runs: it must be short and
  // must not write through this store synchronously. A server answers many
  // concurrent writes this way without a thread for each.
  using ApplyFn =
      absl::AnyInvocable<absl::Status(Transaction&, const ChangeStamp&)>;
  using DoneFn = absl::AnyInvocable<void(absl::StatusOr<ChangeStamp>) &&>;
  void SubmitReplicated(ReplicatedChange change, ApplyFn apply, DoneFn done)
      ABSL_LOCKS_EXCLUDED(mu_, queue_mu_);

  // From now on WriteReplicated signs each change with `signer` in the
  // transaction that logs it; a signer's error fails that write alone.
  // Null: changes are not signed (a node outside a mesh).
  void SetChangeSigner(ChangeSigner signer) ABSL_LOCKS_EXCLUDED(mu_);
  // Signs one change of this node with the signer set (nullopt when none
  // is).
  std::optional<absl::StatusOr<std::string>> SignChange(
      const ChangeStamp& stamp, absl::string_view table, absl::string_view key,
      const std::optional<std::string>& value) ABSL_LOCKS_EXCLUDED(mu_);

  // Holds this node's own writes (WriteReplicated, SubmitReplicated): they
  // queue, uncommitted and unanswered, until ReleaseLocalWrites or for
  // `at_most` (then they go on). Replication holds them while it learns
  // from peers whether they hold changes of this node that its database
  // lacks (restored from an older copy), and takes those back first: a
  // write committed meanwhile would stamp one of their sequence numbers
  // again, and peers would take it as a duplicate (docs/replication.md).
  // Changes from peers (InReplicatedTransaction) are not held. A store
  // closed while holding fails the held writes with UNAVAILABLE.
  void HoldLocalWrites(absl::Duration at_most) ABSL_LOCKS_EXCLUDED(queue_mu_);
  void ReleaseLocalWrites() ABSL_LOCKS_EXCLUDED(queue_mu_);
  bool holding_local_writes() ABSL_LOCKS_EXCLUDED(queue_mu_);

  // How many commits WriteReplicated made, and how many writes they held
  // (for tests and benchmarks).
  struct GroupCommitStats {
    uint64_t commits = 0;
    uint64_t writes = 0;
  };
  GroupCommitStats group_commit_stats() ABSL_LOCKS_EXCLUDED(queue_mu_);

  // Checkpoints the background checkpointer ran (see Open), for tests.
  uint64_t background_checkpoints() const {
    return background_checkpoints_.load();
  }
  // Syncs of the WAL the checkpointer made between its passes (under
  // synchronous=NORMAL, every kPresyncFrames), for tests.
  uint64_t background_wal_syncs() const { return background_wal_syncs_.load(); }

  // Durability of this node's own changes, for replication: a change must
  // not reach a peer before it is on disk, or a power loss would take it
  // back and its sequence number would be stamped again on another change,
  // which the peer that holds the first takes as a duplicate.
  //
  // The highest sequence number of this node whose change is on disk: all
  // of them at Open (which syncs the WAL), then as the committer syncs.
  int64_t durable_seq() const { return durable_seq_.load(); }
  // From now on, after each commit that holds writes of this node, the
  // committer makes them durable and calls `listener` with durable_seq(),
  // on its thread, after the writes have been answered. With
  // synchronous=FULL the commit itself did it; with NORMAL the committer
  // syncs the WAL (one fsync for all the commits since the last; the
  // writes were answered before it, so a put's latency does not include
  // it). While more writes wait, it syncs at most every 5 ms instead of
  // after each commit. With no listener set, NORMAL never syncs outside
  // checkpoints. Once a sync has failed, none is trusted again (nor is
  // the listener called) until the store is opened anew: a failed fsync
  // may have lost pages that a later one reports as written.
  // `listener` must be short, as `done` of SubmitReplicated.
  void SetDurableListener(std::function<void(int64_t)> listener)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Makes every commit so far durable now (syncs the WAL, under NORMAL)
  // and returns durable_seq(). Not from the committer thread's `done`.
  // After a failed sync, that failure every time.
  absl::StatusOr<int64_t> Sync() ABSL_LOCKS_EXCLUDED(mu_);

  // The bytes the database's pages in use hold (its pages less its free
  // list, times the page size; the WAL's committed pages count, the
  // file's free pages do not), as measured at most 100 ms ago: a quota
  // check per write costs nothing then.
  absl::StatusOr<int64_t> UsedBytes() ABSL_LOCKS_EXCLUDED(mu_);

  // Runs `fn` in a transaction whose statements may write replicated tables
  // and the change log directly, for changes made on other nodes, which
  // keep the stamps their origin gave them. Only the store's replication
  // code (daemon/store/objects.cc) calls it: it checks the sequence and
  // logs each change itself. Everything else goes through WriteReplicated.
  absl::Status InReplicatedTransaction(
      absl::FunctionRef<absl::Status(Transaction&)> fn)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Takes in a time stamped by another node (Hlc::Receive): later local
  // stamps are past it. FAILED_PRECONDITION when it is more than
  // `max_offset` ahead of this node's clock.
  absl::StatusOr<HlcTime> ReceiveHlc(HlcTime remote,
                                     absl::Duration max_offset) {
    return hlc_.Receive(remote, max_offset);
  }

  // This node, as the origin of the changes it stamps.
  std::string origin() const ABSL_LOCKS_EXCLUDED(origin_mu_) {
    absl::MutexLock lock(&origin_mu_);
    return origin_;
  }
  // Makes `origin` this node's origin, in one transaction with its changes
  // so far, which are renamed to it and unsigned (the origin is part of
  // what a signature covers: ObjectStore::SignOwnUnsigned signs them
  // again). For a node that joins a mesh under an origin other than its
  // name (above), before its changes travel. FAILED_PRECONDITION when this
  // store already holds changes of `origin`.
  absl::Status AdoptOrigin(const std::string& origin) ABSL_LOCKS_EXCLUDED(mu_);

  // How many statements Execute and Query keep prepared (for tests).
  size_t cached_statements() ABSL_LOCKS_EXCLUDED(mu_);

  // Records a start of the daemon (table boots): when, which version, pid.
  absl::Status RecordBoot(absl::Time started, absl::string_view version,
                          int64_t pid);

  // Key/value metadata (table meta).
  absl::StatusOr<std::string> GetMeta(absl::string_view key);
  absl::Status SetMeta(absl::string_view key, absl::string_view value);

  // Copies the WAL into the main file and truncates it (used before a
  // shutdown so that the database is a single consistent file).
  absl::Status Checkpoint() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class Transaction;
  friend int Authorize(void* store, int action, const char* a, const char* b,
                       const char* db, const char* trigger);
  Store(std::string path, DbHandle db, int version, Options options,
        HlcTime hlc_floor);

  // Statements, by text; those of WriteReplicated apart, since only they
  // may write replicated tables (the authorizer checks at prepare time).
  absl::StatusOr<Stmt*> CachedLocked(absl::string_view sql, bool replicated)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ExecuteLocked(absl::string_view sql, bool replicated,
                             absl::FunctionRef<void(Stmt&)> bind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status QueryLocked(absl::string_view sql, bool replicated,
                           absl::FunctionRef<void(Stmt&)> bind,
                           absl::FunctionRef<absl::Status(const Stmt&)> row)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status InTransactionLocked(
      bool replicated, absl::FunctionRef<absl::Status(Transaction&)> fn)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // One write waiting in the group-commit queue.
  struct PendingWrite {
    // What it counts against Options::max_queued_bytes.
    size_t bytes() const {
      return change.table.size() + change.key.size() +
             (change.value.has_value() ? change.value->size() : 0);
    }
    ReplicatedChange change;
    ApplyFn apply;
    DoneFn done;
    absl::StatusOr<ChangeStamp> result = absl::UnknownError("not committed");
  };
  using Batch = std::vector<std::unique_ptr<PendingWrite>>;
  static constexpr size_t kMaxBatch = 1000;
  // The committer thread: commits what is queued, batch after batch, and
  // calls each write's `done` in commit order, until the store closes.
  void CommitLoop() ABSL_LOCKS_EXCLUDED(mu_, queue_mu_);
  // Commits `batch` in one transaction, a savepoint per write, and sets
  // each one's result.
  void CommitBatchLocked(const Batch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Syncs the WAL (and so every commit before) to disk.
  absl::Status SyncWalLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The checkpointer thread: copies the WAL into the database on its own
  // connection whenever a commit left kCheckpointFrames or more in it,
  // until the store closes.
  void CheckpointLoop() ABSL_LOCKS_EXCLUDED(checkpoint_mu_, mu_);
  // On the checkpointer thread: syncs its connection's database file
  // (SQLITE_FCNTL_FILE_POINTER) or WAL (SQLITE_FCNTL_JOURNAL_POINTER).
  int SyncCheckpointFile(int which);
  // sqlite3_wal_hook of db_: after each commit, the WAL's size in frames.
  static int OnWalCommit(void* store, sqlite3* db, const char* schema,
                         int frames);
  // Whether `table` may be written now (the authorizer's question).
  bool MayWrite(absl::string_view table) const;

  const std::string path_;
  mutable absl::Mutex origin_mu_;
  std::string origin_ ABSL_GUARDED_BY(origin_mu_);
  absl::flat_hash_map<std::string, Replication> tables_;
  absl::Mutex mu_;
  DbHandle db_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Stmt, std::less<>> statements_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Stmt, std::less<>> replicated_statements_
      ABSL_GUARDED_BY(mu_);
  // Set while a statement of WriteReplicated is prepared or run; read by
  // the authorizer, which SQLite calls on that thread (mu_ held).
  bool writing_replicated_ = false;
  class WritingReplicated {
   public:
    WritingReplicated(Store* s, bool on) : s_(s), was_(s->writing_replicated_) {
      s_->writing_replicated_ = on;
    }
    ~WritingReplicated() { s_->writing_replicated_ = was_; }

   private:
    Store* s_;
    bool was_;
  };
  // The last table the authorizer refused a write to, for the error.
  std::string refused_table_;
  const int schema_version_;
  Hlc hlc_;
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  ChangeSigner signer_ ABSL_GUARDED_BY(mu_);
  const bool synchronous_full_;
  std::atomic<int64_t> durable_seq_{0};
  // UsedBytes's last measure, and when it was taken (steady clock, ns).
  std::atomic<int64_t> used_bytes_{0};
  std::atomic<int64_t> used_bytes_at_ns_{0};
  std::function<void(int64_t)> durable_listener_ ABSL_GUARDED_BY(mu_);
  // When the committer last synced for the listener.
  std::chrono::steady_clock::time_point last_sync_ ABSL_GUARDED_BY(mu_);
  // The first failed WAL sync, sticky: see SyncWalLocked.
  absl::Status sync_failure_ ABSL_GUARDED_BY(mu_);
  static constexpr std::chrono::milliseconds kMaxSyncDelay{5};

  // Group commit (SubmitReplicated): the writes waiting for the next
  // commit, and the thread that commits them.
  absl::Mutex queue_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  Batch queue_ ABSL_GUARDED_BY(queue_mu_);
  const size_t max_queued_writes_;
  const size_t max_queued_bytes_;
  // Bytes of the keys and values in queue_.
  size_t queued_bytes_ ABSL_GUARDED_BY(queue_mu_) = 0;
  bool closing_ ABSL_GUARDED_BY(queue_mu_) = false;
  // HoldLocalWrites: until when (InfinitePast: not held).
  absl::Time hold_until_ ABSL_GUARDED_BY(queue_mu_) = absl::InfinitePast();
  std::thread committer_ ABSL_GUARDED_BY(queue_mu_);
  GroupCommitStats group_stats_ ABSL_GUARDED_BY(queue_mu_);

  // Background checkpoints: SQLite's own run in the commit that crosses
  // 1,000 frames and hold up every commit queued behind it for the copy
  // and two fsyncs (docs/performance.md). The checkpointer's connection,
  // used on its thread only.
  static constexpr int kCheckpointFrames = 1000;
  static constexpr int kRestartFrames = 4 * kCheckpointFrames;
  // Under synchronous=NORMAL commits do not sync the WAL, and a passive
  // checkpoint that cannot copy it all (commits keep coming) leaves the
  // database file unsynced: the commit that finishes the copy at
  // kRestartFrames paid for both, two fsyncs of megabytes while every
  // write waited (the put's p99 under load). The checkpointer syncs the
  // WAL every kPresyncFrames and the database file after each pass, so
  // that the finish finds little left to sync.
  static constexpr int kPresyncFrames = 250;
  DbHandle checkpoint_db_;
  std::thread checkpointer_;
  absl::Mutex checkpoint_mu_ ABSL_ACQUIRED_AFTER(mu_);
  bool checkpoint_wanted_ ABSL_GUARDED_BY(checkpoint_mu_) = false;
  bool presync_wanted_ ABSL_GUARDED_BY(checkpoint_mu_) = false;
  bool checkpoint_stop_ ABSL_GUARDED_BY(checkpoint_mu_) = false;
  // The WAL size (frames) at which a commit next wakes the checkpointer,
  // for a pass and (synchronous=NORMAL) for a sync of the WAL.
  int wake_checkpointer_at_ ABSL_GUARDED_BY(mu_) = kCheckpointFrames;
  int presync_at_ ABSL_GUARDED_BY(mu_) = kPresyncFrames;
  // Held while a checkpoint runs on either connection: one at a time.
  absl::Mutex checkpoint_run_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::atomic<uint64_t> background_checkpoints_{0};
  std::atomic<uint64_t> background_wal_syncs_{0};
};

}  // namespace mycel::store

#endif  // MYCEL_DAEMON_STORE_STORE_H_
