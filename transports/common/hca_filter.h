// Device selection by TIDE_IB_HCA (NCCL_IB_HCA syntax) for the nets that
// drive RDMA devices.
#pragma once

#include <string>
#include <vector>

namespace tide {

// "mlx5_0:1,mlx5_1" (prefixes, optional :port), "^mlx5_2" (exclude), "=mlx5_0"
// (exact names). Items are trimmed of spaces. Empty: everything matches.
class HcaFilter {
 public:
  static HcaFilter parse(const std::string& spec);
  bool matches(const std::string& device, int port) const;
  bool empty() const { return items_.empty(); }

 private:
  struct Item {
    std::string name;
    int port = -1;  // -1: any
  };
  std::vector<Item> items_;
  bool exclude_ = false;
  bool exact_ = false;
};

}  // namespace tide
