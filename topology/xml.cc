// Minimal XML parser (recursive descent over the whole text).
#include "topology/xml.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tide::topo {

std::string XmlNode::attr(const std::string& name, const std::string& def) const {
  for (const auto& [k, v] : attrs) {
    if (k == name) return v;
  }
  return def;
}

bool XmlNode::has(const std::string& name) const {
  for (const auto& kv : attrs) {
    if (kv.first == name) return true;
  }
  return false;
}

double XmlNode::num(const std::string& name, double def) const {
  std::string v = attr(name);
  if (v.empty()) return def;
  char* end = nullptr;
  double d = v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')
                 ? static_cast<double>(strtoull(v.c_str(), &end, 16))
                 : strtod(v.c_str(), &end);
  return end == v.c_str() ? def : d;
}

namespace {

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  Status document(XmlNode* root) {
    skipMisc();
    if (!at('<')) return error("no root element");
    TIDE_TRY(element(root, 0));
    skipMisc();
    if (pos_ != s_.size()) return error("content after the root element");
    return Status::Ok();
  }

 private:
  bool at(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
  bool startsWith(const char* p) const { return s_.compare(pos_, strlen(p), p) == 0; }
  void skipSpace() {
    while (pos_ < s_.size() && isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  Status error(const char* what) const {
    int line = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) line += s_[i] == '\n';
    return invalidArgument("XML: %s at line %d", what, line);
  }
  bool skipUntil(const char* end) {
    size_t e = s_.find(end, pos_);
    if (e == std::string::npos) return false;
    pos_ = e + strlen(end);
    return true;
  }
  // Comments, processing instructions, DOCTYPE, whitespace.
  void skipMisc() {
    for (;;) {
      skipSpace();
      if (startsWith("<!--")) {
        if (!skipUntil("-->")) pos_ = s_.size();
      } else if (startsWith("<?")) {
        if (!skipUntil("?>")) pos_ = s_.size();
      } else if (startsWith("<!")) {
        if (!skipUntil(">")) pos_ = s_.size();
      } else {
        return;
      }
    }
  }
  std::string name() {
    size_t b = pos_;
    while (pos_ < s_.size() && (isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' ||
                                s_[pos_] == '-' || s_[pos_] == ':' || s_[pos_] == '.'))
      ++pos_;
    return s_.substr(b, pos_ - b);
  }
  static std::string decode(const std::string& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] != '&') {
        out += v[i];
        continue;
      }
      static const char* ents[][2] = {
          {"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}, {"&quot;", "\""}, {"&apos;", "'"}};
      bool done = false;
      for (auto& e : ents) {
        if (v.compare(i, strlen(e[0]), e[0]) == 0) {
          out += e[1];
          i += strlen(e[0]) - 1;
          done = true;
          break;
        }
      }
      if (!done) out += '&';
    }
    return out;
  }
  Status element(XmlNode* node, int depth) {
    if (depth > 64) return error("nesting too deep");
    ++pos_;  // '<'
    node->tag = name();
    if (node->tag.empty()) return error("empty tag name");
    for (;;) {
      skipSpace();
      if (startsWith("/>")) {
        pos_ += 2;
        return Status::Ok();
      }
      if (at('>')) {
        ++pos_;
        break;
      }
      std::string key = name();
      if (key.empty()) return error("bad attribute");
      skipSpace();
      if (!at('=')) return error("attribute without value");
      ++pos_;
      skipSpace();
      if (!at('"') && !at('\'')) return error("unquoted attribute");
      char q = s_[pos_++];
      size_t e = s_.find(q, pos_);
      if (e == std::string::npos) return error("unterminated attribute");
      node->attrs.emplace_back(key, decode(s_.substr(pos_, e - pos_)));
      pos_ = e + 1;
    }
    // Content.
    for (;;) {
      size_t lt = s_.find('<', pos_);
      if (lt == std::string::npos) return error("unterminated element");
      node->text += s_.substr(pos_, lt - pos_);
      pos_ = lt;
      if (startsWith("</")) {
        pos_ += 2;
        std::string closing = name();
        if (closing != node->tag) return error("mismatched closing tag");
        skipSpace();
        if (!at('>')) return error("bad closing tag");
        ++pos_;
        return Status::Ok();
      }
      if (startsWith("<!--") || startsWith("<?") || startsWith("<!")) {
        skipMisc();
        continue;
      }
      node->kids.emplace_back();
      TIDE_TRY(element(&node->kids.back(), depth + 1));
    }
  }

  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

Status parseXml(const std::string& text, XmlNode* root) {
  *root = XmlNode{};
  return Parser(text).document(root);
}

std::string xmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Status readFile(const std::string& path, std::string* out) {
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return errnoError(errno, "cannot open %s", path.c_str());
  out->clear();
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
    out->append(buf, n);
    if (out->size() > (64u << 20)) {
      fclose(f);
      return invalidArgument("%s is larger than 64 MiB", path.c_str());
    }
  }
  fclose(f);
  return Status::Ok();
}

Status writeFile(const std::string& path, const std::string& data) {
  std::string tmp = path + ".tmp";
  FILE* f = fopen(tmp.c_str(), "wb");
  if (f == nullptr) return errnoError(errno, "cannot write %s", tmp.c_str());
  bool ok = fwrite(data.data(), 1, data.size(), f) == data.size();
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    remove(tmp.c_str());
    return errnoError(err, "cannot write %s", path.c_str());
  }
  return Status::Ok();
}

}  // namespace tide::topo
