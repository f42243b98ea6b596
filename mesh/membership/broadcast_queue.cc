#include "mesh/membership/broadcast_queue.h"

#include <utility>

namespace mycel::membership {

// The smallest update (a suspect or dead notice with one-byte names) takes
// about this many bytes; with less budget left, stop looking.
constexpr size_t kMinUpdateBytes = 10;

void BroadcastQueue::Push(absl::string_view name, Update update,
                          size_t wire_size, bool urgent, bool join) {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) {
    queue_.erase(it->second);
    by_name_.erase(it);
  }
  const Key key{!urgent, 0, next_id_++};
  queue_.emplace(key,
                 Entry{std::string(name), std::move(update), wire_size, join});
  by_name_.emplace(std::string(name), key);
}

size_t BroadcastQueue::Take(size_t budget, int limit, int join_limit,
                            std::vector<Update>* out) {
  size_t used = 0;
  std::vector<std::pair<Key, Entry>> again;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (budget - used < kMinUpdateBytes) break;
    if (it->second.wire_size > budget - used) {
      ++it;
      continue;
    }
    used += it->second.wire_size;
    out->push_back(it->second.update);
    Key key = it->first;
    Entry entry = std::move(it->second);
    it = queue_.erase(it);
    if (key.transmits + 1 >= (entry.join ? join_limit : limit)) {
      by_name_.erase(entry.name);
    } else {
      ++key.transmits;
      again.emplace_back(key, std::move(entry));
    }
  }
  // Reinserted after the walk so that one call never takes an update twice.
  for (auto& [key, entry] : again) {
    by_name_[entry.name] = key;
    queue_.emplace(key, std::move(entry));
  }
  return used;
}

}  // namespace mycel::membership
