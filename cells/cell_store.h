// CellStore: the rows behind cells and executables in the state database.
#ifndef MYCEL_CELLS_CELL_STORE_H_
#define MYCEL_CELLS_CELL_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/store/store.h"
#include "mycel/v1/cells.pb.h"

namespace mycel::cells {

struct CellRow {
  mycel::v1::CellSpec spec;
  int64_t created_us = 0;
  int64_t init_pid = 0;
  uint64_t init_start_time = 0;
  // A throwaway cell of Cells.Run (see CellManager::CreateOptions).
  bool ephemeral = false;
};

struct ExecutableRow {
  mycel::v1::ExecutableSpec spec;
  mycel::v1::ExecutableStatus status;
  uint64_t start_time = 0;  // of status.pid, for adoption
};

// Thread-safe (the Store serialises access). `store` must outlive it.
class CellStore {
 public:
  explicit CellStore(store::Store* store) : store_(store) {}

  // ALREADY_EXISTS when the name is taken.
  absl::Status InsertCell(const CellRow& row);
  absl::Status SetCellInit(const std::string& name, int64_t pid,
                           uint64_t start_time);
  // Also deletes the cell's executables.
  absl::Status DeleteCell(const std::string& name);
  absl::StatusOr<std::vector<CellRow>> LoadCells();

  absl::Status PutExecutable(const ExecutableRow& row);
  absl::Status DeleteExecutable(const std::string& cell,
                                const std::string& name);
  absl::StatusOr<std::vector<ExecutableRow>> LoadExecutables();

 private:
  store::Store* const store_;
};

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_CELL_STORE_H_
