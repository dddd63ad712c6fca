// Generates docs/env.md from the knob table (src/core/knobs.def).
//   gen_env_doc            prints the document
//   gen_env_doc --check F  exits 1 when F differs (the unit test
//                          env_doc_current runs this)
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "core/config.h"

namespace {

const char* typeName(tide::KnobType t) {
  switch (t) {
    case tide::KnobType::Int:
      return "integer";
    case tide::KnobType::Bool:
      return "0/1";
    case tide::KnobType::Size:
      return "bytes (K/M/G)";
    case tide::KnobType::String:
      return "string";
  }
  return "?";
}

std::string render() {
  std::ostringstream o;
  o << "# Environment variables\n\n"
       "Generated from `src/core/knobs.def` by `tools/gen_env_doc` — edit the table, then run\n"
       "`build/tools/gen_env_doc > docs/env.md` (the unit test `env_doc_current` fails when\n"
       "this file is stale). Where an NCCL name is given, it is read when the Tide name is\n"
       "unset.\n\n"
       "| Variable | NCCL name | Type | Default | Meaning |\n"
       "|---|---|---|---|---|\n";
  int n = 0;
  const tide::KnobInfo* t = tide::knobTable(&n);
  for (int i = 0; i < n; ++i) {
    o << "| `" << t[i].name << "` | "
      << (t[i].ncclAlias[0] ? std::string("`") + t[i].ncclAlias + "`" : "") << " | "
      << typeName(t[i].type) << " | "
      << (t[i].defaultValue[0] ? std::string("`") + t[i].defaultValue + "`" : "(unset)") << " | "
      << t[i].doc << " |\n";
  }
  o << "\nLauncher variables read by `tideCommInitFromEnv` besides the above: torchrun's\n"
       "`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`\n"
       "(Tide meets on `MASTER_PORT + 1`); Open MPI's `OMPI_COMM_WORLD_RANK`, `_SIZE`,\n"
       "`_LOCAL_RANK`, `_LOCAL_SIZE`; Slurm's `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`.\n";
  return o.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string doc = render();
  if (argc == 3 && strcmp(argv[1], "--check") == 0) {
    std::ifstream f(argv[2]);
    std::stringstream ss;
    ss << f.rdbuf();
    if (ss.str() != doc) {
      fprintf(stderr, "%s is stale: regenerate it with gen_env_doc > %s\n", argv[2], argv[2]);
      return 1;
    }
    return 0;
  }
  fputs(doc.c_str(), stdout);
  return 0;
}
