// Per-job facts tiderun hands to its ranks: identifiers, secret, ports and
// the environment block of each rank.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tiderun {

// `bytes` random bytes from getrandom (falling back to /dev/urandom), as
// 2 * bytes lower-case hex characters. Returns "" when no randomness is
// available.
std::string RandomHex(size_t bytes);

// Picks a currently free TCP port by binding port 0 on `addr` (any address
// when `addr` cannot be bound) and closing the socket again. Returns 0 and
// sets *error on failure.
int PickFreePort(const std::string& addr, std::string* error);

// Removes /dev/shm entries whose names start with "tide-<job_id>". Returns the
// number removed. job_id must be non-empty.
int RemoveShmLeftovers(const std::string& job_id);

// An environment block: the current environment (environ) with the variables
// in `set` replaced or added. Owns its strings; envp() is valid while *this
// lives and is not modified.
class EnvBlock {
 public:
  explicit EnvBlock(const std::vector<std::pair<std::string, std::string>>& set);
  EnvBlock(const EnvBlock&) = delete;  // envp() points into strings_
  EnvBlock& operator=(const EnvBlock&) = delete;
  char** envp() { return ptrs_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> ptrs_;
};

}  // namespace tiderun
