// A small XML reader and writer, enough for topology files: elements,
// attributes, self-closing tags, comments, <?...?> and <!DOCTYPE ...>.
// Text content is ignored except inside hwloc's value lists (kept in
// XmlNode::text). Entities &lt; &gt; &amp; &quot; &apos; are decoded.
// Pure functions; no I/O except readFile/writeFile.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tide::topo {

struct XmlNode {
  std::string tag;
  std::vector<std::pair<std::string, std::string>> attrs;
  std::vector<XmlNode> kids;
  std::string text;

  // Attribute value, or `def` when absent.
  std::string attr(const std::string& name, const std::string& def = "") const;
  bool has(const std::string& name) const;
  double num(const std::string& name, double def = 0) const;  // leading number of the value
};

Status parseXml(const std::string& text, XmlNode* root);
// Escapes &, <, >, " for attribute values.
std::string xmlEscape(const std::string& s);

Status readFile(const std::string& path, std::string* out);
Status writeFile(const std::string& path, const std::string& data);

}  // namespace tide::topo
