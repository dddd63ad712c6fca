#include "transports/common/hca_filter.h"

#include <cstdlib>

namespace tide {

HcaFilter HcaFilter::parse(const std::string& spec) {
  HcaFilter f;
  size_t i = 0;
  if (i < spec.size() && spec[i] == '^') {
    f.exclude_ = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '=') {
    f.exact_ = true;
    ++i;
  }
  while (i <= spec.size()) {
    size_t comma = spec.find(',', i);
    if (comma == std::string::npos) comma = spec.size();
    std::string tok = spec.substr(i, comma - i);
    i = comma + 1;
    while (!tok.empty() && tok.front() == ' ') tok.erase(tok.begin());
    while (!tok.empty() && tok.back() == ' ') tok.pop_back();
    if (tok.empty()) continue;
    Item item;
    size_t colon = tok.find(':');
    item.name = tok.substr(0, colon);
    if (colon != std::string::npos) {
      char* end = nullptr;
      long port = strtol(tok.c_str() + colon + 1, &end, 10);
      item.port = (end && *end == '\0' && port > 0) ? static_cast<int>(port) : -1;
    }
    if (!item.name.empty()) f.items_.push_back(item);
  }
  return f;
}

bool HcaFilter::matches(const std::string& device, int port) const {
  if (items_.empty()) return true;
  bool hit = false;
  for (const Item& it : items_) {
    bool name = exact_ ? device == it.name : device.compare(0, it.name.size(), it.name) == 0;
    if (name && (it.port < 0 || it.port == port)) {
      hit = true;
      break;
    }
  }
  return exclude_ ? !hit : hit;
}

}  // namespace tide
