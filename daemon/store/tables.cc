#include "daemon/store/tables.h"

namespace mycel::store {
namespace {

constexpr TableInfo kTables[] = {
    {"meta", Replication::kNodeLocal, "key/value facts about this node"},
    {"boots", Replication::kNodeLocal, "one row per daemon start"},
    {"cells", Replication::kNodeLocal, "this node's cells"},
    {"executables", Replication::kNodeLocal, "this node's executables"},
    {"members", Replication::kNodeLocal,
     "the mesh members this node knows, to rejoin without a seed"},
    {"change_log", Replication::kChangeLog,
     "every change to a replicated table, stamped with origin, sequence and "
     "hybrid logical clock"},
};

}  // namespace

std::span<const TableInfo> BuiltinTables() { return kTables; }

}  // namespace mycel::store
