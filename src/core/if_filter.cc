#include "core/if_filter.h"

namespace tide {

bool interfaceNameMatches(const std::string& filter, const std::string& name) {
  std::string f = filter;
  bool exclude = false, exact = false;
  if (!f.empty() && f[0] == '^') exclude = true, f.erase(0, 1);
  if (!f.empty() && f[0] == '=') exact = true, f.erase(0, 1);
  bool hit = false;
  size_t pos = 0;
  while (!hit && pos <= f.size()) {
    size_t comma = f.find(',', pos);
    std::string item = f.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!item.empty()) hit = exact ? item == name : name.compare(0, item.size(), item) == 0;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return exclude ? !hit : hit;
}

}  // namespace tide
