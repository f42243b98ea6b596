#include "tests/testing/power_loss_vfs.h"

#include <sqlite3.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace mycel::testing {
namespace {

namespace fs = std::filesystem;

// The file as SQLite sees it, with the real file of the default VFS
// allocated right after it.
struct File {
  sqlite3_file base;
  sqlite3_file* real;
  // Empty for a temporary file (no name): never copied.
  std::string* path;
};

sqlite3_vfs* Real() { return sqlite3_vfs_find(nullptr); }

std::string Synced(const std::string& path) { return path + ".synced"; }

// Copies the file as it is now to its .synced twin, replaced atomically.
// Syncs come from more than one thread (the store's committer and its
// checkpointer), which would otherwise share the temporary copy.
int KeepSynced(const std::string& path) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::error_code ec;
  const std::string tmp = path + ".synced-tmp";
  fs::copy_file(path, tmp, fs::copy_options::overwrite_existing, ec);
  if (ec) return SQLITE_IOERR_FSYNC;
  fs::rename(tmp, Synced(path), ec);
  return ec ? SQLITE_IOERR_FSYNC : SQLITE_OK;
}

sqlite3_file* R(sqlite3_file* f) { return reinterpret_cast<File*>(f)->real; }

int Close(sqlite3_file* f) {
  File* file = reinterpret_cast<File*>(f);
  int rc = file->real->pMethods->xClose(file->real);
  delete file->path;
  file->path = nullptr;
  return rc;
}
int Read(sqlite3_file* f, void* buf, int n, sqlite3_int64 off) {
  return R(f)->pMethods->xRead(R(f), buf, n, off);
}
int Write(sqlite3_file* f, const void* buf, int n, sqlite3_int64 off) {
  return R(f)->pMethods->xWrite(R(f), buf, n, off);
}
int Truncate(sqlite3_file* f, sqlite3_int64 size) {
  return R(f)->pMethods->xTruncate(R(f), size);
}
std::atomic<bool> g_sync_fails{false};

int Sync(sqlite3_file* f, int flags) {
  if (g_sync_fails.load()) return SQLITE_IOERR_FSYNC;
  File* file = reinterpret_cast<File*>(f);
  int rc = file->real->pMethods->xSync(file->real, flags);
  if (rc != SQLITE_OK || file->path == nullptr) return rc;
  return KeepSynced(*file->path);
}
int FileSize(sqlite3_file* f, sqlite3_int64* size) {
  return R(f)->pMethods->xFileSize(R(f), size);
}
int Lock(sqlite3_file* f, int level) {
  return R(f)->pMethods->xLock(R(f), level);
}
int Unlock(sqlite3_file* f, int level) {
  return R(f)->pMethods->xUnlock(R(f), level);
}
int CheckReservedLock(sqlite3_file* f, int* out) {
  return R(f)->pMethods->xCheckReservedLock(R(f), out);
}
int FileControl(sqlite3_file* f, int op, void* arg) {
  return R(f)->pMethods->xFileControl(R(f), op, arg);
}
int SectorSize(sqlite3_file* f) { return R(f)->pMethods->xSectorSize(R(f)); }
int DeviceCharacteristics(sqlite3_file* f) {
  return R(f)->pMethods->xDeviceCharacteristics(R(f));
}
int ShmMap(sqlite3_file* f, int region, int size, int extend,
           void volatile** out) {
  return R(f)->pMethods->xShmMap(R(f), region, size, extend, out);
}
int ShmLock(sqlite3_file* f, int offset, int n, int flags) {
  return R(f)->pMethods->xShmLock(R(f), offset, n, flags);
}
void ShmBarrier(sqlite3_file* f) { R(f)->pMethods->xShmBarrier(R(f)); }
int ShmUnmap(sqlite3_file* f, int del) {
  return R(f)->pMethods->xShmUnmap(R(f), del);
}
int Fetch(sqlite3_file* f, sqlite3_int64 off, int n, void** out) {
  return R(f)->pMethods->xFetch(R(f), off, n, out);
}
int Unfetch(sqlite3_file* f, sqlite3_int64 off, void* p) {
  return R(f)->pMethods->xUnfetch(R(f), off, p);
}

const sqlite3_io_methods kMethods = {
    .iVersion = 3,
    .xClose = Close,
    .xRead = Read,
    .xWrite = Write,
    .xTruncate = Truncate,
    .xSync = Sync,
    .xFileSize = FileSize,
    .xLock = Lock,
    .xUnlock = Unlock,
    .xCheckReservedLock = CheckReservedLock,
    .xFileControl = FileControl,
    .xSectorSize = SectorSize,
    .xDeviceCharacteristics = DeviceCharacteristics,
    .xShmMap = ShmMap,
    .xShmLock = ShmLock,
    .xShmBarrier = ShmBarrier,
    .xShmUnmap = ShmUnmap,
    .xFetch = Fetch,
    .xUnfetch = Unfetch,
};

int Open(sqlite3_vfs* vfs, const char* name, sqlite3_file* f, int flags,
         int* out_flags) {
  File* file = reinterpret_cast<File*>(f);
  file->real = reinterpret_cast<sqlite3_file*>(file + 1);
  file->path = nullptr;
  f->pMethods = nullptr;
  std::error_code ec;
  const bool existed = name != nullptr && fs::exists(name, ec);
  int rc = Real()->xOpen(Real(), name, file->real, flags, out_flags);
  if (rc != SQLITE_OK) return rc;
  f->pMethods = &kMethods;
  if (name != nullptr) {
    file->path = new std::string(name);
    // What was there before this open counts as on disk (the code that
    // made it synced it, or an earlier power loss left it).
    if (existed && !fs::exists(Synced(name), ec)) {
      rc = KeepSynced(*file->path);
      if (rc != SQLITE_OK) {
        Close(f);
        f->pMethods = nullptr;
        return rc;
      }
    }
  }
  return SQLITE_OK;
}

int Delete(sqlite3_vfs* vfs, const char* name, int sync_dir) {
  std::error_code ec;
  fs::remove(Synced(name), ec);
  return Real()->xDelete(Real(), name, sync_dir);
}
int Access(sqlite3_vfs* vfs, const char* name, int flags, int* out) {
  return Real()->xAccess(Real(), name, flags, out);
}
int FullPathname(sqlite3_vfs* vfs, const char* name, int n, char* out) {
  return Real()->xFullPathname(Real(), name, n, out);
}
void* DlOpen(sqlite3_vfs* vfs, const char* name) {
  return Real()->xDlOpen(Real(), name);
}
void DlError(sqlite3_vfs* vfs, int n, char* out) {
  Real()->xDlError(Real(), n, out);
}
void (*DlSym(sqlite3_vfs* vfs, void* h, const char* sym))(void) {
  return Real()->xDlSym(Real(), h, sym);
}
void DlClose(sqlite3_vfs* vfs, void* h) { Real()->xDlClose(Real(), h); }
int Randomness(sqlite3_vfs* vfs, int n, char* out) {
  return Real()->xRandomness(Real(), n, out);
}
int Sleep(sqlite3_vfs* vfs, int us) { return Real()->xSleep(Real(), us); }
int CurrentTime(sqlite3_vfs* vfs, double* out) {
  return Real()->xCurrentTime(Real(), out);
}
int GetLastError(sqlite3_vfs* vfs, int n, char* out) {
  return Real()->xGetLastError(Real(), n, out);
}
int CurrentTimeInt64(sqlite3_vfs* vfs, sqlite3_int64* out) {
  return Real()->xCurrentTimeInt64(Real(), out);
}

}  // namespace

void SetPowerLossSyncFailure(bool fail) { g_sync_fails = fail; }

void RegisterPowerLossVfs() {
  static std::once_flag once;
  std::call_once(once, [] {
    static sqlite3_vfs vfs;
    std::memset(&vfs, 0, sizeof(vfs));
    vfs.iVersion = 2;
    vfs.szOsFile = static_cast<int>(sizeof(File)) + Real()->szOsFile;
    vfs.mxPathname = Real()->mxPathname;
    vfs.zName = kPowerLossVfs;
    vfs.xOpen = Open;
    vfs.xDelete = Delete;
    vfs.xAccess = Access;
    vfs.xFullPathname = FullPathname;
    vfs.xDlOpen = DlOpen;
    vfs.xDlError = DlError;
    vfs.xDlSym = DlSym;
    vfs.xDlClose = DlClose;
    vfs.xRandomness = Randomness;
    vfs.xSleep = Sleep;
    vfs.xCurrentTime = CurrentTime;
    vfs.xGetLastError = GetLastError;
    vfs.xCurrentTimeInt64 = CurrentTimeInt64;
    sqlite3_vfs_register(&vfs, /*makeDflt=*/0);
  });
}

absl::Status SimulatePowerLoss(const std::string& db) {
  std::error_code ec;
  for (const std::string& path : {db, db + "-wal", db + "-journal"}) {
    if (fs::exists(Synced(path), ec)) {
      fs::rename(Synced(path), path, ec);
    } else {
      fs::remove(path, ec);
    }
    if (ec) {
      return absl::InternalError(
          absl::StrCat("power loss of ", path, ": ", ec.message()));
    }
  }
  fs::remove(db + "-shm", ec);
  if (ec)
    return absl::InternalError(absl::StrCat("remove -shm: ", ec.message()));
  return absl::OkStatus();
}

}  // namespace mycel::testing
