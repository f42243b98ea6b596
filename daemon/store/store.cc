#include "daemon/store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/types.h>

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "runtime/fs.h"
#include "runtime/log.h"
#include "runtime/status.h"
#include "runtime/unique_fd.h"

namespace mycel::store {
namespace {

// The database and its WAL: the daemon's alone.
constexpr mode_t kDatabaseMode = 0600;

absl::StatusOr<int> UserVersion(sqlite3* db) {
  ASSIGN_OR_RETURN(Stmt stmt, Stmt::Prepare(db, "PRAGMA user_version"));
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::InternalError("PRAGMA user_version returned no row");
  return static_cast<int>(stmt.ColumnInt(0));
}

absl::Status Configure(sqlite3* db, bool synchronous_full) {
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 5000);
  // journal_mode answers with the mode in force; anything but "wal" means
  // the file system could not do it (and is worth failing over).
  ASSIGN_OR_RETURN(Stmt wal, Stmt::Prepare(db, "PRAGMA journal_mode=WAL"));
  ASSIGN_OR_RETURN(bool row, wal.Step());
  if (!row || wal.ColumnText(0) != "wal") {
    return absl::FailedPreconditionError(
        absl::StrCat("journal_mode=WAL not accepted (mode is \"",
                     row ? wal.ColumnText(0) : "", "\")"));
  }
  // temp_store=MEMORY: the group commit's savepoint per write journals the
  // pages it changes in a statement journal, which otherwise goes to a
  // temporary file (about half of the pwrite calls of a put; measured
  // with tests/bench/state_put_bench). Checkpoints run on the store's
  // checkpointer thread (Store::Open), not in the commits.
  RETURN_IF_ERROR(Exec(db, "PRAGMA temp_store=MEMORY"));
  return Exec(db, synchronous_full ? "PRAGMA foreign_keys=ON;"
                                     "PRAGMA synchronous=FULL;"
                                   : "PRAGMA foreign_keys=ON;"
                                     "PRAGMA synchronous=NORMAL;");
}

absl::Status QuickCheck(sqlite3* db) {
  ASSIGN_OR_RETURN(Stmt stmt, Stmt::Prepare(db, "PRAGMA quick_check"));
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (row && stmt.ColumnText(0) == "ok") return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "integrity check failed: ", row ? stmt.ColumnText(0) : "no result"));
}

// Every pending migration in one transaction: an upgrade (or a new
// database, which takes them all) is applied whole or not at all, and pays
// one commit rather than one per version.
absl::Status Migrate(sqlite3* db, int from,
                     std::span<const Migration> migrations) {
  if (migrations.empty() || migrations.back().version <= from) {
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(Exec(db, "BEGIN IMMEDIATE"));
  for (const Migration& m : migrations) {
    if (m.version <= from) continue;
    absl::Status s = Exec(db, m.sql);
    if (s.ok()) {
      s = Exec(db, absl::StrCat("PRAGMA user_version=", m.version));
    }
    if (!s.ok()) {
      Exec(db, "ROLLBACK").IgnoreError();  // Report the migration's error.
      return Annotate(s,
                      absl::StrCat("migration to schema version ", m.version));
    }
  }
  return Exec(db, "COMMIT");
}

absl::Status OpenImpl(const std::string& path, const Store::Options& options,
                      bool exclusive, DbHandle* out_db, int* out_v) {
  sqlite3* raw = nullptr;
  // Never SQLITE_OPEN_CREATE: an existing file that is not a database,
  // empty ones included, must be refused rather than taken as a new one
  // (see Store::Open, which creates new databases).
  int rc = sqlite3_open_v2(path.c_str(), &raw,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                           options.vfs.empty() ? nullptr : options.vfs.c_str());
  DbHandle db(raw);
  if (rc != SQLITE_OK) return SqliteError("open", db.get(), rc);
  // A database being created has one connection, which holds the file
  // lock for good (and runs with no journal, below). The store's own
  // database shares it with the checkpointer's connection (Store::Open),
  // so it takes the lock per transaction and keeps the WAL index in the
  // shared-memory file beside it. The pragma only sets a flag.
  if (exclusive) {
    RETURN_IF_ERROR(Exec(db.get(), "PRAGMA locking_mode=EXCLUSIVE"));
  }
  // Reading the header is the first thing that notices a file that is not
  // a database, so do it before changing any setting.
  ASSIGN_OR_RETURN(int version, UserVersion(db.get()));
  std::span<const Migration> migrations =
      options.migrations.empty() ? BuiltinMigrations() : options.migrations;
  int latest = migrations.empty() ? 0 : migrations.back().version;
  if (version > latest) {
    return absl::FailedPreconditionError(absl::StrCat(
        "schema version ", version, " is newer than this myceld supports (",
        latest, "); run a newer myceld or restore an older database"));
  }
  if (exclusive) {
    // A database being made is a file no one reads until CreateDatabase
    // has synced it and renamed it into place, and a failed one is
    // removed: it needs neither a journal nor syncs of its own. The WAL
    // that the store runs on is set when it is opened under its name.
    sqlite3_extended_result_codes(db.get(), 1);
    RETURN_IF_ERROR(Exec(db.get(),
                         "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; "
                         "PRAGMA foreign_keys=ON;"));
  } else {
    RETURN_IF_ERROR(Configure(db.get(), options.synchronous_full));
  }
  if (options.integrity_check) RETURN_IF_ERROR(QuickCheck(db.get()));
  RETURN_IF_ERROR(Migrate(db.get(), version, migrations));
  *out_db = std::move(db);
  *out_v = latest;
  return absl::OkStatus();
}

// Makes a new database at `path`, which does not exist: built and migrated
// under a temporary name, then renamed into place, so that `path` never
// names a file that is not a whole database, even after a crash in the
// middle. The file is private to the daemon (0600): it holds executables'
// environments, which carry secrets.
absl::Status CreateDatabase(const std::string& path,
                            const Store::Options& options) {
  const std::string tmp = path + ".new";
  // Left by a crash during an earlier creation; the caller holds the state
  // directory's lock, so no one else is making it.
  if (absl::Status s = RemoveFile(tmp); !s.ok() && !absl::IsNotFound(s)) {
    return s;
  }
  {
    absl::StatusOr<UniqueFd> fd =
        OpenFile(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, kDatabaseMode);
    if (!fd.ok()) return fd.status();
  }
  {
    DbHandle db;
    int version = 0;
    absl::Status s = OpenImpl(tmp, options, /*exclusive=*/true, &db, &version);
    if (!s.ok()) {
      RemoveFile(tmp).IgnoreError();  // the error that matters is `s`
      return s;
    }
    // Closing the last connection checkpoints the WAL into the file and
    // removes it.
  }
  RETURN_IF_ERROR(SyncPath(tmp));
  RETURN_IF_ERROR(Rename(tmp, path));
  size_t slash = path.rfind('/');
  return SyncPath(slash == std::string::npos ? "."
                  : slash == 0               ? "/"
                                             : path.substr(0, slash));
}

// Clears group and other bits of the database and the files SQLite keeps
// beside it (which it creates with the database's mode), logging each one
// it had to change.
absl::Status TightenDatabaseFiles(const std::string& path) {
  for (const std::string& p : {path, path + "-wal", path + "-shm"}) {
    absl::StatusOr<bool> changed = TightenMode(p, kDatabaseMode);
    if (absl::IsNotFound(changed.status())) continue;
    RETURN_IF_ERROR(changed.status());
    if (*changed) {
      log::Warn("state database file was readable by others; now 0600",
                {{"path", p}});
    }
  }
  return absl::OkStatus();
}

absl::Status PrepareFile(const std::string& path,
                         const Store::Options& options) {
  absl::StatusOr<FileInfo> st = LinkStat(path);
  if (!st.ok()) {
    if (!absl::IsNotFound(st.status())) return st.status();
    return CreateDatabase(path, options);
  }
  if (!st->is_regular()) {
    return absl::FailedPreconditionError(
        "is not a regular file; refusing to use it");
  }
  if (st->size == 0) {
    return absl::DataLossError(
        "is empty (0 bytes), so whatever it held is gone; myceld creates a "
        "database only where there is no file. Restore it from a backup, or "
        "remove it to start with no state (cells that ran are forgotten, "
        "and their cgroups and processes are left behind)");
  }
  return TightenDatabaseFiles(path);
}

// Checks that every table of the schema is declared, and reads where the
// change log left off: this origin's last sequence and the highest time.
absl::Status ReadSchema(sqlite3* db, const Store::Options& options,
                        std::span<const TableInfo> tables, int64_t* last_seq,
                        HlcTime* hlc_floor) {
  ASSIGN_OR_RETURN(Stmt list,
                   Stmt::Prepare(db,
                                 "SELECT name FROM sqlite_schema WHERE "
                                 "type='table' AND name NOT LIKE 'sqlite_%'"));
  bool change_log = false;
  for (;;) {
    ASSIGN_OR_RETURN(bool row, list.Step());
    if (!row) break;
    const std::string name = list.ColumnText(0);
    change_log |= name == "change_log";
    bool declared = false;
    for (const TableInfo& t : tables) declared |= t.name == name;
    if (!declared) {
      return absl::FailedPreconditionError(
          absl::StrCat("schema: table ", name,
                       " is not declared node-local or replicated "
                       "(daemon/store/tables.cc)"));
    }
  }
  if (!change_log) return absl::OkStatus();
  // The highest time of any origin: this node's clock starts past every
  // change it has, its own and those it received.
  ASSIGN_OR_RETURN(
      Stmt last,
      Stmt::Prepare(db,
                    "SELECT (SELECT coalesce(max(seq), 0) FROM change_log "
                    "WHERE origin=?), (SELECT coalesce(max(hlc), 0) FROM "
                    "change_log)"));
  last.Bind(1, options.origin);
  ASSIGN_OR_RETURN(bool row, last.Step());
  if (row) {
    *last_seq = last.ColumnInt(0);
    *hlc_floor = static_cast<HlcTime>(last.ColumnInt(1));
  }
  return absl::OkStatus();
}

}  // namespace

int Authorize(void* store, int action, const char* a, const char*, const char*,
              const char*) {
  if (action != SQLITE_INSERT && action != SQLITE_UPDATE &&
      action != SQLITE_DELETE) {
    return SQLITE_OK;
  }
  auto* s = static_cast<Store*>(store);
  if (a == nullptr || s->MayWrite(a)) return SQLITE_OK;
  s->refused_table_ = a;
  return SQLITE_DENY;
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path,
                                                   Options options) {
  DbHandle db;
  int version = 0;
  int64_t last_seq = 0;
  HlcTime hlc_floor = 0;
  std::span<const TableInfo> tables =
      options.tables.empty() ? BuiltinTables() : options.tables;
  absl::Status s = PrepareFile(path, options);
  if (s.ok()) s = OpenImpl(path, options, /*exclusive=*/false, &db, &version);
  if (s.ok()) s = ReadSchema(db.get(), options, tables, &last_seq, &hlc_floor);
  if (!s.ok()) return Annotate(s, absl::StrCat("state database ", path));
  const std::string vfs = options.vfs;
  std::unique_ptr<Store> store(
      new Store(path, std::move(db), version, std::move(options), hlc_floor));
  absl::MutexLock lock(&store->mu_);
  store->next_seq_ = last_seq + 1;
  // What an earlier run committed may still be only in the page cache (it
  // was killed, or closed without a checkpoint): on disk before any of it
  // can be published.
  if (s = store->SyncWalLocked(); !s.ok()) {
    return Annotate(s, absl::StrCat("state database ", path));
  }
  store->durable_seq_ = last_seq;
  for (const TableInfo& t : tables) {
    store->tables_[std::string(t.name)] = t.replication;
  }
  // Installed after the migrations, which may create and fill any table.
  sqlite3_set_authorizer(store->db_.get(), Authorize, store.get());
  // Checkpoints run on a connection of their own, on their own thread: a
  // checkpoint copies about 1,000 pages into the database and syncs twice,
  // and run by the commit that crossed the mark (SQLite's default) it held
  // up every write queued behind that commit. A passive checkpoint waits
  // for no one; commits go on appending to the WAL meanwhile, and the
  // first commit after a checkpoint that copied it all starts the WAL over.
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                           vfs.empty() ? nullptr : vfs.c_str());
  DbHandle checkpoint_db(raw);
  if (rc != SQLITE_OK) {
    return Annotate(SqliteError("open the checkpointer's connection",
                                checkpoint_db.get(), rc),
                    absl::StrCat("state database ", path));
  }
  // Its syncs are the checkpoint's: the same level as the store's.
  s = Exec(checkpoint_db.get(), store->synchronous_full_
                                    ? "PRAGMA synchronous=FULL"
                                    : "PRAGMA synchronous=NORMAL");
  // A first read opens the connection's WAL, which the syncs between
  // passes go through.
  if (s.ok()) s = Exec(checkpoint_db.get(), "PRAGMA schema_version");
  if (!s.ok()) return Annotate(s, absl::StrCat("state database ", path));
  sqlite3_busy_timeout(checkpoint_db.get(), 5000);
  store->checkpoint_db_ = std::move(checkpoint_db);
  // Replaces SQLite's automatic checkpoints.
  sqlite3_wal_hook(store->db_.get(), &Store::OnWalCommit, store.get());
  store->checkpointer_ =
      std::thread([p = store.get()] { p->CheckpointLoop(); });
  return store;
}

int Store::OnWalCommit(void* store, sqlite3* db, const char*, int frames) {
  auto* s = static_cast<Store*>(store);
  // Called in the commit, on the connection's thread (mu_ held).
  s->mu_.AssertHeld();
  // The WAL started over: count from its start again.
  if (frames < s->wake_checkpointer_at_ - kCheckpointFrames) {
    s->wake_checkpointer_at_ = kCheckpointFrames;
  }
  if (frames < s->presync_at_ - kPresyncFrames) {
    s->presync_at_ = kPresyncFrames;
  }
  // A pass for every kCheckpointFrames added, not one after every commit:
  // each pass syncs, which a commit of `full` waiting on its own sync
  // would queue behind. Under `full` the WAL is synced by every commit.
  const bool pass = frames >= s->wake_checkpointer_at_;
  const bool presync = !s->synchronous_full_ && frames >= s->presync_at_;
  if (!pass && !presync) return SQLITE_OK;
  if (pass) s->wake_checkpointer_at_ = frames + kCheckpointFrames;
  if (presync) s->presync_at_ = frames + kPresyncFrames;
  {
    absl::MutexLock lock(&s->checkpoint_mu_);
    s->checkpoint_wanted_ = s->checkpoint_wanted_ || pass;
    s->presync_wanted_ = s->presync_wanted_ || presync;
  }
  if (!pass) return SQLITE_OK;
  // The WAL starts over only at a commit that finds it all copied, which
  // never happens while commits keep coming as fast as the checkpointer
  // copies. Past kRestartFrames this connection waits for the
  // checkpointer's pass to end and finishes the copy itself (what is left
  // of it, and the syncs), so that the next commit starts the WAL over: the
  // WAL stays bounded, at the cost of one wait every kRestartFrames instead
  // of a whole checkpoint in the commit every kCheckpointFrames.
  if (frames >= kRestartFrames) {
    absl::MutexLock run(&s->checkpoint_run_mu_);
    int rc = sqlite3_wal_checkpoint_v2(db, "main", SQLITE_CHECKPOINT_PASSIVE,
                                       nullptr, nullptr);
    if (rc != SQLITE_OK) {
      log::Warn("state database: a checkpoint failed",
                {{"path", s->path_},
                 {"error", SqliteError("checkpoint the WAL", db, rc)}});
    }
  }
  return SQLITE_OK;
}

void Store::CheckpointLoop() {
  for (;;) {
    bool pass;
    {
      absl::MutexLock lock(&checkpoint_mu_);
      checkpoint_mu_.Await(absl::Condition(
          +[](Store* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->checkpoint_mu_) {
            return s->checkpoint_wanted_ || s->presync_wanted_ ||
                   s->checkpoint_stop_;
          },
          this));
      if (checkpoint_stop_) return;
      pass = checkpoint_wanted_;
      checkpoint_wanted_ = false;
      presync_wanted_ = false;
    }
    int rc;
    const char* what;
    if (pass) {
      what = "checkpoint the WAL";
      {
        absl::MutexLock run(&checkpoint_run_mu_);
        rc = sqlite3_wal_checkpoint_v2(checkpoint_db_.get(), "main",
                                       SQLITE_CHECKPOINT_PASSIVE, nullptr,
                                       nullptr);
      }
      background_checkpoints_.fetch_add(1);
      if (rc == SQLITE_BUSY) continue;  // one runs on the other connection
      // What the pass copied, synced now rather than by the commit that
      // finishes the copy (a pass that does not copy it all leaves the
      // database file unsynced).
      if (rc == SQLITE_OK && !synchronous_full_) {
        what = "sync the database file";
        rc = SyncCheckpointFile(SQLITE_FCNTL_FILE_POINTER);
      }
    } else {
      what = "sync the WAL";
      rc = SyncCheckpointFile(SQLITE_FCNTL_JOURNAL_POINTER);
      if (rc == SQLITE_OK) background_wal_syncs_.fetch_add(1);
    }
    if (rc == SQLITE_OK) continue;
    absl::Status failed = SqliteError(what, checkpoint_db_.get(), rc);
    log::Error("state database: a background checkpoint failed",
               {{"path", path_}, {"error", failed}});
    // A sync that failed leaves no later sync trusted (SyncWalLocked).
    if ((rc & 0xff) == SQLITE_IOERR) {
      absl::MutexLock lock(&mu_);
      if (sync_failure_.ok()) sync_failure_ = failed;
    }
  }
}

int Store::SyncCheckpointFile(int which) {
  sqlite3_file* file = nullptr;
  int rc = sqlite3_file_control(checkpoint_db_.get(), "main", which, &file);
  if (rc != SQLITE_OK) return rc;
  // Open since Open read through this connection; a file not open is an
  // error to report, not a sync to skip.
  if (file == nullptr || file->pMethods == nullptr) return SQLITE_MISUSE;
  return file->pMethods->xSync(file, SQLITE_SYNC_NORMAL);
}

Store::Store(std::string path, DbHandle db, int version, Options options,
             HlcTime hlc_floor)
    : path_(std::move(path)),
      origin_(std::move(options.origin)),
      db_(std::move(db)),
      schema_version_(version),
      hlc_(options.clock, hlc_floor),
      synchronous_full_(options.synchronous_full),
      max_queued_writes_(std::max<size_t>(1, options.max_queued_writes)),
      max_queued_bytes_(options.max_queued_bytes) {}

Store::~Store() {
  std::thread committer;
  {
    absl::MutexLock q(&queue_mu_);
    closing_ = true;
    committer = std::move(committer_);
  }
  // It commits and answers what is queued, then returns.
  if (committer.joinable()) committer.join();
  {
    absl::MutexLock lock(&checkpoint_mu_);
    checkpoint_stop_ = true;
  }
  if (checkpointer_.joinable()) checkpointer_.join();
  checkpoint_db_.reset();
  absl::MutexLock lock(&mu_);
  statements_.clear();
  replicated_statements_.clear();
  db_.reset();
}

bool Store::MayWrite(absl::string_view table) const {
  auto it = tables_.find(table);
  // Tables SQLite keeps itself (sqlite_sequence) are not declared.
  if (it == tables_.end() || it->second == Replication::kNodeLocal) {
    return true;
  }
  return writing_replicated_;
}

absl::StatusOr<Stmt*> Store::CachedLocked(absl::string_view sql,
                                          bool replicated) {
  auto& cache = replicated ? replicated_statements_ : statements_;
  auto it = cache.find(sql);
  if (it == cache.end()) {
    refused_table_.clear();
    absl::StatusOr<Stmt> stmt =
        Stmt::Prepare(db_.get(), sql, SQLITE_PREPARE_PERSISTENT);
    if (!stmt.ok()) {
      if (!refused_table_.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "table ", refused_table_,
            " is replicated: write it through Store::WriteReplicated"));
      }
      return stmt.status();
    }
    it = cache.emplace(std::string(sql), *std::move(stmt)).first;
  }
  return &it->second;
}

absl::Status Store::ExecuteLocked(absl::string_view sql, bool replicated,
                                  absl::FunctionRef<void(Stmt&)> bind) {
  // SQLite asks the authorizer when it prepares a statement, and again
  // when it prepares one anew after a schema change.
  WritingReplicated scope(this, replicated);
  ASSIGN_OR_RETURN(Stmt * stmt, CachedLocked(sql, replicated));
  bind(*stmt);
  absl::Status s = stmt->Run();
  stmt->Reset();
  return s;
}

absl::Status Store::QueryLocked(
    absl::string_view sql, bool replicated, absl::FunctionRef<void(Stmt&)> bind,
    absl::FunctionRef<absl::Status(const Stmt&)> row) {
  WritingReplicated scope(this, replicated);
  ASSIGN_OR_RETURN(Stmt * stmt, CachedLocked(sql, replicated));
  bind(*stmt);
  absl::Status s;
  for (;;) {
    absl::StatusOr<bool> more = stmt->Step();
    if (!more.ok()) {
      s = more.status();
      break;
    }
    if (!*more) break;
    s = row(*stmt);
    if (!s.ok()) break;
  }
  stmt->Reset();
  return s;
}

absl::Status Store::InTransactionLocked(
    bool replicated, absl::FunctionRef<absl::Status(Transaction&)> fn) {
  RETURN_IF_ERROR(ExecuteLocked("BEGIN IMMEDIATE", false, [](Stmt&) {}));
  Transaction tx(this, replicated);
  absl::Status s = fn(tx);
  if (!s.ok()) {
    // The error above wins.
    ExecuteLocked("ROLLBACK", false, [](Stmt&) {}).IgnoreError();
    return s;
  }
  s = ExecuteLocked("COMMIT", false, [](Stmt&) {});
  if (!s.ok()) ExecuteLocked("ROLLBACK", false, [](Stmt&) {}).IgnoreError();
  return s;
}

absl::Status Store::Execute(absl::string_view sql,
                            absl::FunctionRef<void(Stmt&)> bind) {
  absl::MutexLock lock(&mu_);
  return ExecuteLocked(sql, false, bind);
}

absl::Status Store::Query(absl::string_view sql,
                          absl::FunctionRef<void(Stmt&)> bind,
                          absl::FunctionRef<absl::Status(const Stmt&)> row) {
  absl::MutexLock lock(&mu_);
  return QueryLocked(sql, false, bind, row);
}

absl::Status Store::InTransaction(
    absl::FunctionRef<absl::Status(Transaction&)> fn) {
  absl::MutexLock lock(&mu_);
  return InTransactionLocked(false, fn);
}

absl::Status Store::InReplicatedTransaction(
    absl::FunctionRef<absl::Status(Transaction&)> fn) {
  absl::MutexLock lock(&mu_);
  const int64_t next_seq = next_seq_;
  absl::Status s = InTransactionLocked(true, fn);
  if (!s.ok()) next_seq_ = next_seq;  // TakeBackOwnSequence undone
  return s;
}

absl::Status Store::AdoptOrigin(const std::string& origin) {
  absl::MutexLock lock(&mu_);
  const std::string old = this->origin();
  if (origin == old) return absl::OkStatus();
  if (origin.empty()) return absl::InvalidArgumentError("origin: empty");
  absl::Status s = InTransactionLocked(true, [&](Transaction& tx) {
    bool held = false;
    RETURN_IF_ERROR(tx.Query(
        "SELECT 1 FROM replica_versions WHERE origin=?",
        [&](Stmt& st) { st.Bind(1, origin); },
        [&](const Stmt&) {
          held = true;
          return absl::OkStatus();
        }));
    if (held) {
      return absl::FailedPreconditionError(absl::StrCat(
          "origin ", origin, ": this database holds changes of it already"));
    }
    for (const char* sql :
         {"UPDATE change_log SET origin=?1, signature=NULL WHERE origin=?2",
          "UPDATE objects SET origin=?1, signature=NULL WHERE origin=?2",
          "UPDATE replica_versions SET origin=?1 WHERE origin=?2"}) {
      RETURN_IF_ERROR(
          tx.Execute(sql, [&](Stmt& st) { st.Bind(1, origin).Bind(2, old); }));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return Annotate(s, "adopt origin");
  absl::MutexLock o(&origin_mu_);
  origin_ = origin;
  return absl::OkStatus();
}

void Transaction::TakeBackOwnSequence(int64_t seq)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // inside InTransaction, mu_ is held
  store_->next_seq_ = std::max(store_->next_seq_, seq + 1);
}

void Store::HoldLocalWrites(absl::Duration at_most) {
  absl::MutexLock q(&queue_mu_);
  hold_until_ = absl::Now() + at_most;
}

void Store::ReleaseLocalWrites() {
  absl::MutexLock q(&queue_mu_);
  hold_until_ = absl::InfinitePast();
}

bool Store::holding_local_writes() {
  absl::MutexLock q(&queue_mu_);
  return hold_until_ > absl::Now();
}

absl::Status Transaction::Execute(absl::string_view sql,
                                  absl::FunctionRef<void(Stmt&)> bind)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // inside InTransaction, mu_ is held
  return store_->ExecuteLocked(sql, replicated_, bind);
}

absl::Status Transaction::Query(
    absl::string_view sql, absl::FunctionRef<void(Stmt&)> bind,
    absl::FunctionRef<absl::Status(const Stmt&)> row)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // inside InTransaction, mu_ is held
  return store_->QueryLocked(sql, replicated_, bind, row);
}

namespace {
// Set on the store's committer thread, where a synchronous write would wait
// for itself.
thread_local const Store* store_thread = nullptr;
}  // namespace

absl::StatusOr<ChangeStamp> Store::WriteReplicated(
    const ReplicatedChange& change,
    absl::FunctionRef<absl::Status(Transaction&, const ChangeStamp&)> apply) {
  if (store_thread == this) {
    return absl::FailedPreconditionError(
        "WriteReplicated called on the store's committer thread, from a "
        "write's answer");
  }
  absl::StatusOr<ChangeStamp> result = absl::UnknownError("not committed");
  absl::Notification committed;
  // `apply` lives on this stack until `committed`.
  SubmitReplicated(
      change,
      [apply](Transaction& tx, const ChangeStamp& stamp) {
        return apply(tx, stamp);
      },
      [&](absl::StatusOr<ChangeStamp> r) {
        result = std::move(r);
        committed.Notify();
      });
  committed.WaitForNotification();
  return result;
}

void Store::SubmitReplicated(ReplicatedChange change, ApplyFn apply,
                             DoneFn done) {
  auto w = std::make_unique<PendingWrite>();
  w->change = std::move(change);
  w->apply = std::move(apply);
  w->done = std::move(done);
  absl::Status refused;
  {
    absl::MutexLock q(&queue_mu_);
    if (closing_) {
      refused = absl::UnavailableError("the store is closing");
    } else if (queue_.size() >= max_queued_writes_) {
      refused = absl::ResourceExhaustedError(absl::StrCat(
          max_queued_writes_,
          " writes already wait for the next commit; try again later"));
    } else if (!queue_.empty() &&
               queued_bytes_ + w->bytes() > max_queued_bytes_) {
      refused = absl::ResourceExhaustedError(absl::StrCat(
          queued_bytes_, " bytes of writes already wait for the next commit ",
          "(limit ", max_queued_bytes_, "); try again later"));
    } else {
      queued_bytes_ += w->bytes();
      queue_.push_back(std::move(w));
      if (!committer_.joinable()) {
        committer_ = std::thread([this] { CommitLoop(); });
      }
      return;
    }
  }
  std::move(w->done)(std::move(refused));
}

void Store::CommitLoop() {
  pthread_setname_np(pthread_self(), "mycel-commit");
  store_thread = this;
  for (;;) {
    Batch batch;
    bool closed_holding = false;
    {
      absl::MutexLock q(&queue_mu_);
      bool waited = false;  // writes waited for a hold
      for (;;) {
        queue_mu_.Await(absl::Condition(
            +[](Store* s) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return !s->queue_.empty() || s->closing_;
            },
            this));
        if (closing_ || hold_until_ == absl::InfinitePast()) break;
        // Held, with writes queued: until the hold ends, is changed, or
        // the store closes.
        struct Held {
          Store* store;
          absl::Time until;
        } held{this, hold_until_};
        if (absl::Now() < held.until) {
          queue_mu_.AwaitWithDeadline(
              absl::Condition(
                  +[](Held* h) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                    return h->store->closing_ ||
                           h->store->hold_until_ != h->until;
                  },
                  &held),
              held.until);
          waited = true;
          continue;
        }
        if (waited) {
          log::Warn(
              "state database: this node's writes were held for as long as "
              "they may be; they go on",
              {{"queued", static_cast<uint64_t>(queue_.size())}});
        }
        hold_until_ = absl::InfinitePast();
        break;
      }
      // Closing with nothing queued: every write taken has been answered.
      if (queue_.empty()) return;
      closed_holding = closing_ && hold_until_ > absl::Now();
      if (closed_holding) {
        batch.swap(queue_);
        queued_bytes_ = 0;
      } else if (queue_.size() <= kMaxBatch) {
        batch.swap(queue_);
      } else {
        // The oldest first; the rest wait for the next commit.
        batch.assign(std::make_move_iterator(queue_.begin()),
                     std::make_move_iterator(queue_.begin() + kMaxBatch));
        queue_.erase(queue_.begin(), queue_.begin() + kMaxBatch);
      }
      if (!closed_holding) {
        for (const std::unique_ptr<PendingWrite>& w : batch) {
          queued_bytes_ -= w->bytes();
        }
      }
    }
    if (closed_holding) {
      const absl::Status closed = absl::UnavailableError(
          "the state database closed while this node's writes were held "
          "(taking back its own changes from peers); not written");
      for (std::unique_ptr<PendingWrite>& w : batch) {
        std::move(w->done)(closed);
      }
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      CommitBatchLocked(batch);
    }
    {
      absl::MutexLock q(&queue_mu_);
      ++group_stats_.commits;
      group_stats_.writes += batch.size();
    }
    // Answered here rather than handed to another thread: a handoff per
    // batch cost more than the answers (measured with state_put_bench).
    for (std::unique_ptr<PendingWrite>& w : batch) {
      std::move(w->done)(std::move(w->result));
    }
    // Then made durable for replication, if it asked (SetDurableListener).
    // With more writes already queued, a sync may wait for the next commit
    // (each sync covers all before it), but not past kMaxSyncDelay: under
    // load the committer syncs that often rather than after every commit.
    bool more_queued = false;
    {
      absl::MutexLock q(&queue_mu_);
      more_queued = !queue_.empty();
    }
    std::function<void(int64_t)> listener;
    int64_t seq = 0;
    {
      absl::MutexLock lock(&mu_);
      seq = next_seq_ - 1;
      if (!durable_listener_ || seq <= durable_seq_.load()) continue;
      const auto now = std::chrono::steady_clock::now();
      if (!synchronous_full_ && more_queued &&
          now - last_sync_ < kMaxSyncDelay) {
        continue;
      }
      last_sync_ = now;
      if (!synchronous_full_) {
        const bool failed_before = !sync_failure_.ok();
        if (absl::Status s = SyncWalLocked(); !s.ok()) {
          // Nothing past the last good sync is published, now or later
          // (SyncWalLocked); said once.
          if (!failed_before) {
            log::Error(
                "state database: a WAL sync failed; this node's changes "
                "stay local until myceld restarts",
                {{"path", path_}, {"status", s}});
          }
          continue;
        }
      }
      durable_seq_ = seq;
      listener = durable_listener_;
    }
    listener(seq);
  }
}

absl::Status Store::SyncWalLocked() {
  // After a failed fsync the kernel may have dropped the pages it could not
  // write and marked them clean, so a later fsync can succeed without them
  // (PostgreSQL's "fsyncgate"). No later sync is trusted: only a restart,
  // which reads back what is really on disk, makes changes durable again.
  if (!sync_failure_.ok()) return sync_failure_;
  sqlite3_file* wal = nullptr;
  int rc = sqlite3_file_control(db_.get(), "main", SQLITE_FCNTL_JOURNAL_POINTER,
                                &wal);
  if (rc != SQLITE_OK) return SqliteError("find the WAL", db_.get(), rc);
  // No WAL open: every commit is in the main file, which checkpoints sync.
  if (wal == nullptr || wal->pMethods == nullptr) return absl::OkStatus();
  rc = wal->pMethods->xSync(wal, SQLITE_SYNC_NORMAL);
  if (rc != SQLITE_OK) {
    // The connection's own error message is not about this call.
    sync_failure_ = SqliteError("sync the WAL", nullptr, rc);
    return sync_failure_;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Store::Sync() {
  absl::MutexLock lock(&mu_);
  const int64_t seq = next_seq_ - 1;
  if (!synchronous_full_) RETURN_IF_ERROR(SyncWalLocked());
  if (seq > durable_seq_.load()) durable_seq_ = seq;
  return durable_seq_.load();
}

absl::StatusOr<int64_t> Store::UsedBytes() {
  constexpr int64_t kMaxAgeNs = 100'000'000;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  const int64_t at = used_bytes_at_ns_.load();
  if (at != 0 && now - at < kMaxAgeNs) return used_bytes_.load();
  int64_t bytes = 0;
  RETURN_IF_ERROR(Query(
      "SELECT (p.page_count - f.freelist_count) * s.page_size FROM "
      "pragma_page_count AS p, pragma_freelist_count AS f, "
      "pragma_page_size AS s",
      [](Stmt&) {},
      [&](const Stmt& st) {
        bytes = st.ColumnInt(0);
        return absl::OkStatus();
      }));
  used_bytes_ = bytes;
  used_bytes_at_ns_ = now;
  return bytes;
}

void Store::SetDurableListener(std::function<void(int64_t)> listener) {
  absl::MutexLock lock(&mu_);
  durable_listener_ = std::move(listener);
}

void Store::CommitBatchLocked(const Batch& batch) {
  const int64_t first_seq = next_seq_;
  absl::Status s = ExecuteLocked("BEGIN IMMEDIATE", false, [](Stmt&) {});
  if (!s.ok()) {
    for (const std::unique_ptr<PendingWrite>& w : batch) w->result = s;
    return;
  }
  Transaction tx(this, true);
  std::vector<PendingWrite*> written;
  for (const std::unique_ptr<PendingWrite>& pending : batch) {
    PendingWrite* w = pending.get();
    const ReplicatedChange& change = w->change;
    auto it = tables_.find(change.table);
    if (it == tables_.end() || it->second != Replication::kReplicated) {
      w->result = absl::InvalidArgumentError(
          absl::StrCat("table ", change.table, " is not a replicated table"));
      continue;
    }
    ChangeStamp stamp;
    stamp.origin = origin();
    stamp.seq = next_seq_;
    stamp.hlc = hlc_.Now();
    if (signer_) {
      absl::StatusOr<std::string> signature = signer_(
          ChangeSigningBytes(stamp, change.table, change.key, change.value));
      if (!signature.ok()) {
        w->result = Annotate(signature.status(), "sign the change");
        continue;
      }
      stamp.signature = *std::move(signature);
    }
    absl::Status ws = ExecuteLocked("SAVEPOINT write", false, [](Stmt&) {});
    if (ws.ok()) ws = w->apply(tx, stamp);
    if (ws.ok()) {
      ws = tx.Execute(
          "INSERT INTO change_log(origin, seq, hlc, tbl, key, value, "
          "signature) VALUES(?, ?, ?, ?, ?, ?, ?)",
          [&](Stmt& st) {
            st.Bind(1, stamp.origin)
                .Bind(2, stamp.seq)
                .Bind(3, static_cast<int64_t>(stamp.hlc))
                .Bind(4, change.table)
                .Bind(5, change.key);
            if (change.value.has_value()) {
              st.BindBlob(6, *change.value);
            } else {
              st.BindNull(6);
            }
            if (stamp.signature.empty()) {
              st.BindNull(7);
            } else {
              st.BindBlob(7, stamp.signature);
            }
          });
    }
    if (!ws.ok()) {
      // This write alone goes; the ones before it in the batch stay.
      ExecuteLocked("ROLLBACK TO write", false, [](Stmt&) {}).IgnoreError();
    }
    absl::Status released = ExecuteLocked("RELEASE write", false, [](Stmt&) {});
    // Some errors (a full disk, I/O) make SQLite roll the whole transaction
    // back; what follows would then run outside one, each statement on its
    // own. The batch ends here, and every write of it fails.
    if (!released.ok() || sqlite3_get_autocommit(db_.get()) != 0) {
      const absl::Status lost =
          !ws.ok() ? ws : Annotate(released, "the group commit's transaction");
      ExecuteLocked("ROLLBACK", false, [](Stmt&) {}).IgnoreError();
      next_seq_ = first_seq;
      for (const std::unique_ptr<PendingWrite>& failed : batch) {
        if (failed->result.ok() || failed.get() == w ||
            absl::IsUnknown(failed->result.status())) {
          failed->result = lost;
        }
      }
      return;
    }
    if (!ws.ok()) {
      w->result = ws;
      continue;
    }
    w->result = stamp;
    written.push_back(w);
    ++next_seq_;
  }
  s = ExecuteLocked("COMMIT", false, [](Stmt&) {});
  if (!s.ok()) {
    ExecuteLocked("ROLLBACK", false, [](Stmt&) {}).IgnoreError();
    next_seq_ = first_seq;
    for (PendingWrite* w : written) w->result = s;
  }
}

std::string ChangeSigningBytes(const ChangeStamp& stamp,
                               absl::string_view table, absl::string_view key,
                               const std::optional<std::string>& value) {
  std::string out("mycel.change.v1");
  out.push_back('\0');
  auto put_u64 = [&out](uint64_t v) {
    for (int shift = 56; shift >= 0; shift -= 8) {
      out.push_back(static_cast<char>((v >> shift) & 0xff));
    }
  };
  auto put_bytes = [&](absl::string_view b) {
    put_u64(b.size());
    out.append(b.data(), b.size());
  };
  put_bytes(stamp.origin);
  put_u64(static_cast<uint64_t>(stamp.seq));
  put_u64(stamp.hlc);
  put_bytes(table);
  put_bytes(key);
  out.push_back(value.has_value() ? 1 : 0);
  if (value.has_value()) put_bytes(*value);
  return out;
}

void Store::SetChangeSigner(ChangeSigner signer) {
  absl::MutexLock lock(&mu_);
  signer_ = std::move(signer);
}

std::optional<absl::StatusOr<std::string>> Store::SignChange(
    const ChangeStamp& stamp, absl::string_view table, absl::string_view key,
    const std::optional<std::string>& value) {
  ChangeSigner signer;
  {
    absl::MutexLock lock(&mu_);
    signer = signer_;
  }
  if (!signer) return std::nullopt;
  return signer(ChangeSigningBytes(stamp, table, key, value));
}

Store::GroupCommitStats Store::group_commit_stats() {
  absl::MutexLock q(&queue_mu_);
  return group_stats_;
}

size_t Store::cached_statements() {
  absl::MutexLock lock(&mu_);
  return statements_.size() + replicated_statements_.size();
}

absl::Status Store::RecordBoot(absl::Time started, absl::string_view version,
                               int64_t pid) {
  return Execute(
      "INSERT INTO boots(started_at, version, pid) VALUES(?, ?, ?)",
      [&](Stmt& st) {
        st.Bind(1, absl::ToUnixSeconds(started)).Bind(2, version).Bind(3, pid);
      });
}

absl::StatusOr<std::string> Store::GetMeta(absl::string_view key) {
  std::optional<std::string> value;
  RETURN_IF_ERROR(Query(
      "SELECT value FROM meta WHERE key=?", [&](Stmt& st) { st.Bind(1, key); },
      [&](const Stmt& st) {
        value = st.ColumnText(0);
        return absl::OkStatus();
      }));
  if (!value.has_value()) {
    return absl::NotFoundError(absl::StrCat("meta key \"", key, "\""));
  }
  return *std::move(value);
}

absl::Status Store::SetMeta(absl::string_view key, absl::string_view value) {
  return Execute(
      "INSERT INTO meta(key, value) VALUES(?, ?) "
      "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
      [&](Stmt& st) { st.Bind(1, key).Bind(2, value); });
}

absl::Status Store::Checkpoint() {
  absl::MutexLock lock(&mu_);
  // Not beside a pass of the checkpointer, which would make it BUSY.
  absl::MutexLock run(&checkpoint_run_mu_);
  int rc = sqlite3_wal_checkpoint_v2(
      db_.get(), nullptr, SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqliteError("wal checkpoint", db_.get(), rc);
  return absl::OkStatus();
}

}  // namespace mycel::store
