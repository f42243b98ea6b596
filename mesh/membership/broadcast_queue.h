// Updates waiting to be piggybacked (memberlist's TransmitLimitedQueue).
// Each update is about one member, and a newer update about a member
// replaces the queued one. Updates go out fewest-transmissions first, then
// newest first, as many as fit a byte budget; each is sent `limit` times
// (retransmit_mult * ceil(log10(n + 1))) and then dropped. Unlike
// memberlist, an update marked `urgent` (our own record: a refutation or a
// leave) goes before all others: when hundreds of updates compete, as after
// a partition heals, a refutation that waits its turn can arrive after the
// suspicion timeout.
#ifndef MYCEL_MESH_MEMBERSHIP_BROADCAST_QUEUE_H_
#define MYCEL_MESH_MEMBERSHIP_BROADCAST_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "mesh/membership/message.h"

namespace mycel::membership {

// Not thread-safe; owned by one Membership.
class BroadcastQueue {
 public:
  // Queues `update` about member `name`, taking `wire_size` bytes of a
  // message, in place of any update queued about the same member. A `join`
  // update (the news of a member that joined) is sent `join_limit` times
  // rather than `limit` (Take).
  void Push(absl::string_view name, Update update, size_t wire_size,
            bool urgent = false, bool join = false);

  // Appends to `out` the queued updates that fit in `budget` bytes, in
  // order; each taken update counts one transmission and is dropped once it
  // has been sent `limit` times (`join_limit` for a join). Returns the bytes
  // taken.
  size_t Take(size_t budget, int limit, int join_limit,
              std::vector<Update>* out);
  size_t Take(size_t budget, int limit, std::vector<Update>* out) {
    return Take(budget, limit, limit, out);
  }

  bool Contains(absl::string_view name) const {
    return by_name_.contains(name);
  }
  size_t size() const { return queue_.size(); }
  bool empty() const { return queue_.empty(); }

 private:
  // Ordered urgent first, then by transmissions, then newest (highest id)
  // first.
  struct Key {
    bool routine;
    int transmits;
    uint64_t id;
    bool operator<(const Key& o) const {
      if (routine != o.routine) return !routine;
      if (transmits != o.transmits) return transmits < o.transmits;
      return id > o.id;
    }
  };
  struct Entry {
    std::string name;
    Update update;
    size_t wire_size;
    bool join = false;
  };

  std::map<Key, Entry> queue_;
  absl::flat_hash_map<std::string, Key> by_name_;
  uint64_t next_id_ = 1;
};

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_BROADCAST_QUEUE_H_
