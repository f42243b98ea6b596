#include "cells/cell_store.h"

#include "absl/strings/str_cat.h"
#include "runtime/status.h"

namespace mycel::cells {

using store::Stmt;

absl::Status CellStore::InsertCell(const CellRow& row) {
  absl::Status s = store_->Execute(
      "INSERT INTO cells(name, spec, created_us, init_pid, init_start_time, "
      "ephemeral) VALUES(?,?,?,?,?,?)",
      [&](Stmt& st) {
        st.Bind(1, row.spec.name())
            .BindBlob(2, row.spec.SerializeAsString())
            .Bind(3, row.created_us)
            .Bind(4, row.init_pid)
            .Bind(5, static_cast<int64_t>(row.init_start_time))
            .Bind(6, int64_t{row.ephemeral});
      });
  if (s.code() == absl::StatusCode::kAlreadyExists) {
    return absl::AlreadyExistsError(
        absl::StrCat("cell \"", row.spec.name(), "\" already exists"));
  }
  return s;
}

absl::Status CellStore::SetCellInit(const std::string& name, int64_t pid,
                                    uint64_t start_time) {
  return store_->Execute(
      "UPDATE cells SET init_pid=?, init_start_time=? WHERE name=?",
      [&](Stmt& st) {
        st.Bind(1, pid).Bind(2, static_cast<int64_t>(start_time)).Bind(3, name);
      });
}

absl::Status CellStore::DeleteCell(const std::string& name) {
  return store_->Execute("DELETE FROM cells WHERE name=?",
                         [&](Stmt& st) { st.Bind(1, name); });
}

absl::StatusOr<std::vector<CellRow>> CellStore::LoadCells() {
  std::vector<CellRow> out;
  RETURN_IF_ERROR(store_->Query(
      "SELECT spec, created_us, init_pid, init_start_time, ephemeral FROM "
      "cells ORDER BY name",
      [](Stmt&) {},
      [&](const Stmt& st) {
        CellRow r;
        if (!r.spec.ParseFromString(st.ColumnBlob(0))) {
          return absl::DataLossError("cells: a spec does not parse");
        }
        r.created_us = st.ColumnInt(1);
        r.init_pid = st.ColumnInt(2);
        r.init_start_time = static_cast<uint64_t>(st.ColumnInt(3));
        r.ephemeral = st.ColumnInt(4) != 0;
        out.push_back(std::move(r));
        return absl::OkStatus();
      }));
  return out;
}

absl::Status CellStore::PutExecutable(const ExecutableRow& row) {
  return store_->Execute(
      "INSERT INTO executables(cell, name, spec, status, pid, start_time) "
      "VALUES(?,?,?,?,?,?) ON CONFLICT(cell, name) DO UPDATE SET "
      "spec=excluded.spec, status=excluded.status, pid=excluded.pid, "
      "start_time=excluded.start_time",
      [&](Stmt& st) {
        st.Bind(1, row.spec.cell())
            .Bind(2, row.spec.name())
            .BindBlob(3, row.spec.SerializeAsString())
            .BindBlob(4, row.status.SerializeAsString())
            .Bind(5, row.status.pid())
            .Bind(6, static_cast<int64_t>(row.start_time));
      });
}

absl::Status CellStore::DeleteExecutable(const std::string& cell,
                                         const std::string& name) {
  return store_->Execute("DELETE FROM executables WHERE cell=? AND name=?",
                         [&](Stmt& st) { st.Bind(1, cell).Bind(2, name); });
}

absl::StatusOr<std::vector<ExecutableRow>> CellStore::LoadExecutables() {
  std::vector<ExecutableRow> out;
  RETURN_IF_ERROR(store_->Query(
      "SELECT spec, status, start_time FROM executables ORDER BY cell, name",
      [](Stmt&) {},
      [&](const Stmt& st) {
        ExecutableRow r;
        if (!r.spec.ParseFromString(st.ColumnBlob(0)) ||
            !r.status.ParseFromString(st.ColumnBlob(1))) {
          return absl::DataLossError("executables: a row does not parse");
        }
        r.start_time = static_cast<uint64_t>(st.ColumnInt(2));
        out.push_back(std::move(r));
        return absl::OkStatus();
      }));
  return out;
}

}  // namespace mycel::cells
