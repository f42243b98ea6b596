#include "cells/cell_store.h"

#include "absl/strings/str_cat.h"
#include "runtime/status.h"

namespace mycel::cells {

using store::Stmt;

absl::Status CellStore::InsertCell(const CellRow& row) {
  absl::Status s = store_->WithStatement(
      "INSERT INTO cells(name, spec, created_us, init_pid, init_start_time, "
      "ephemeral) VALUES(?,?,?,?,?,?)",
      [&](Stmt& st) {
        return st.Bind(1, row.spec.name())
            .BindBlob(2, row.spec.SerializeAsString())
            .Bind(3, row.created_us)
            .Bind(4, row.init_pid)
            .Bind(5, static_cast<int64_t>(row.init_start_time))
            .Bind(6, int64_t{row.ephemeral})
            .Run();
      });
  if (s.code() == absl::StatusCode::kAlreadyExists) {
    return absl::AlreadyExistsError(
        absl::StrCat("cell \"", row.spec.name(), "\" already exists"));
  }
  return s;
}

absl::Status CellStore::SetCellInit(const std::string& name, int64_t pid,
                                    uint64_t start_time) {
  return store_->WithStatement(
      "UPDATE cells SET init_pid=?, init_start_time=? WHERE name=?",
      [&](Stmt& st) {
        return st.Bind(1, pid)
            .Bind(2, static_cast<int64_t>(start_time))
            .Bind(3, name)
            .Run();
      });
}

absl::Status CellStore::DeleteCell(const std::string& name) {
  return store_->WithStatement("DELETE FROM cells WHERE name=?", [&](Stmt& st) {
    return st.Bind(1, name).Run();
  });
}

absl::StatusOr<std::vector<CellRow>> CellStore::LoadCells() {
  return store_->Locked(
      [&](sqlite3* db) -> absl::StatusOr<std::vector<CellRow>> {
        ASSIGN_OR_RETURN(Stmt st,
                         Stmt::Prepare(db,
                                       "SELECT spec, created_us, init_pid, "
                                       "init_start_time, ephemeral FROM "
                                       "cells ORDER BY name"));
        std::vector<CellRow> out;
        for (;;) {
          ASSIGN_OR_RETURN(bool row, st.Step());
          if (!row) break;
          CellRow r;
          if (!r.spec.ParseFromString(st.ColumnBlob(0))) {
            return absl::DataLossError("cells: a spec does not parse");
          }
          r.created_us = st.ColumnInt(1);
          r.init_pid = st.ColumnInt(2);
          r.init_start_time = static_cast<uint64_t>(st.ColumnInt(3));
          r.ephemeral = st.ColumnInt(4) != 0;
          out.push_back(std::move(r));
        }
        return out;
      });
}

absl::Status CellStore::PutExecutable(const ExecutableRow& row) {
  return store_->WithStatement(
      "INSERT INTO executables(cell, name, spec, status, pid, start_time) "
      "VALUES(?,?,?,?,?,?) ON CONFLICT(cell, name) DO UPDATE SET "
      "spec=excluded.spec, status=excluded.status, pid=excluded.pid, "
      "start_time=excluded.start_time",
      [&](Stmt& st) {
        return st.Bind(1, row.spec.cell())
            .Bind(2, row.spec.name())
            .BindBlob(3, row.spec.SerializeAsString())
            .BindBlob(4, row.status.SerializeAsString())
            .Bind(5, row.status.pid())
            .Bind(6, static_cast<int64_t>(row.start_time))
            .Run();
      });
}

absl::Status CellStore::DeleteExecutable(const std::string& cell,
                                         const std::string& name) {
  return store_->WithStatement(
      "DELETE FROM executables WHERE cell=? AND name=?",
      [&](Stmt& st) { return st.Bind(1, cell).Bind(2, name).Run(); });
}

absl::StatusOr<std::vector<ExecutableRow>> CellStore::LoadExecutables() {
  return store_->Locked(
      [&](sqlite3* db) -> absl::StatusOr<std::vector<ExecutableRow>> {
        ASSIGN_OR_RETURN(Stmt st, Stmt::Prepare(db,
                                                "SELECT spec, status, "
                                                "start_time FROM executables "
                                                "ORDER BY cell, name"));
        std::vector<ExecutableRow> out;
        for (;;) {
          ASSIGN_OR_RETURN(bool row, st.Step());
          if (!row) break;
          ExecutableRow r;
          if (!r.spec.ParseFromString(st.ColumnBlob(0)) ||
              !r.status.ParseFromString(st.ColumnBlob(1))) {
            return absl::DataLossError("executables: a row does not parse");
          }
          r.start_time = static_cast<uint64_t>(st.ColumnInt(2));
          out.push_back(std::move(r));
        }
        return out;
      });
}

}  // namespace mycel::cells
