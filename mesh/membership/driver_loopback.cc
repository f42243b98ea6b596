#include "mesh/membership/driver_loopback.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace mycel::membership {

class LoopbackNetwork::Link final : public Transport {
 public:
  Link(LoopbackNetwork* net, std::string name, std::string address)
      : net_(net), name_(std::move(name)), address_(std::move(address)) {}

  void Send(absl::string_view /*peer*/, absl::string_view address,
            std::string bytes, absl::Duration /*deadline*/,
            bool /*awaits_answer*/, SendDone done) override {
    net_->Route(name_, address_, address, std::move(bytes), std::move(done));
  }

 private:
  LoopbackNetwork* const net_;
  const std::string name_;
  const std::string address_;
};

std::unique_ptr<Transport> LoopbackNetwork::Endpoint(std::string name,
                                                     std::string address) {
  return std::make_unique<Link>(this, std::move(name), std::move(address));
}

void LoopbackNetwork::Attach(const std::string& address, Receiver receiver) {
  absl::MutexLock lock(&mu_);
  receivers_[address] = std::move(receiver);
}

void LoopbackNetwork::Detach(const std::string& address) {
  absl::MutexLock lock(&mu_);
  receivers_.erase(address);
}

void LoopbackNetwork::SetCut(const std::string& address, bool cut) {
  absl::MutexLock lock(&mu_);
  if (cut) {
    cut_.insert(address);
  } else {
    cut_.erase(address);
  }
}

uint64_t LoopbackNetwork::delivered() const {
  absl::MutexLock lock(&mu_);
  return delivered_;
}

uint64_t LoopbackNetwork::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

void LoopbackNetwork::Route(const std::string& from_name,
                            const std::string& from_address,
                            absl::string_view address, std::string bytes,
                            Transport::SendDone done) {
  Receiver receiver;
  {
    absl::MutexLock lock(&mu_);
    auto it = receivers_.find(address);
    if (it == receivers_.end() || cut_.contains(address) ||
        cut_.contains(from_address)) {
      ++dropped_;
    } else {
      ++delivered_;
      receiver = it->second;
    }
  }
  if (!receiver) {
    done(absl::UnavailableError(
             absl::StrCat("loopback: ", address, " unreachable")),
         {});
    return;
  }
  receiver(from_name, std::move(bytes));
  done(absl::OkStatus(), {});
}

}  // namespace mycel::membership
