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
    {"mesh", Replication::kNodeLocal,
     "this node's mesh: name, node name, authority"},
    {"join_tokens", Replication::kNodeLocal,
     "join tokens this node issued (secret hashes only)"},
    {"mesh_peers", Replication::kNodeLocal,
     "the nodes this node admitted, and the authorities it knows"},
    {"revocations", Replication::kNodeLocal,
     "the mesh's revocation list as this node knows it"},
    {"change_log", Replication::kChangeLog,
     "every change to a replicated table, stamped with origin, sequence and "
     "hybrid logical clock"},
    {"objects", Replication::kReplicated,
     "the mesh's shared objects, by namespace and key, last writer wins"},
    {"replica_versions", Replication::kNodeLocal,
     "this node's version vector and change-log floor, per origin"},
    {"kv_changes", Replication::kNodeLocal,
     "the kv keys that changed, at this node's revision, for State.Watch"},
    {"kv_floor", Replication::kNodeLocal,
     "the highest kv revision whose change was collected"},
    {"origin_certificates", Replication::kNodeLocal,
     "the certificate each origin's changes were checked with"},
};

}  // namespace

std::span<const TableInfo> BuiltinTables() { return kTables; }

}  // namespace mycel::store
