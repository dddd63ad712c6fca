// Command line of tiderun: torchrun-style flags followed by the program.
#pragma once

#include <string>
#include <vector>

namespace tiderun {

struct Options {
  int nproc = 1;      // ranks started by this tiderun (one node)
  int nnodes = 1;     // nodes, each running its own tiderun
  int node_rank = 0;  // this node's index in [0, nnodes)
  std::string master_addr = "127.0.0.1";
  int master_port = -1;              // -1 or 0: 29500 if nnodes > 1, else a free port
  bool prefix_output = false;        // prefix each output line with "[rank] "
  double timeout_s = 0;              // stop an attempt after this long; 0 = never
  int max_restarts = 0;              // restarts of the whole job after a rank died
  std::vector<std::string> command;  // program and its arguments, untouched
};

enum class ParseOutcome {
  kRun,      // options are valid and `command` is not empty
  kHelp,     // -h / --help was given
  kVersion,  // --version was given
  kError,    // *error says why (usage error)
};

// Parses argv[1..argc). Option parsing stops at the first argument that is not
// an option (it and everything after it form the command) or after `--`.
// Long options accept `--name value` and `--name=value`; '_' and '-' are
// interchangeable in their names. Pure: touches nothing but its outputs.
ParseOutcome ParseOptions(int argc, const char* const* argv, Options* opts, std::string* error);

// Text printed for --help.
std::string UsageText();

}  // namespace tiderun
