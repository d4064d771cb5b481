// robot-jsonrpc-config-reference: prints the configuration reference of doc/configuration.md (between its markers),
// rendered from the declarations of the configuration keys.
#include "config/config.hpp"

#include <cstdio>

int main() {
  std::fputs(rjg::config::kReferenceBegin, stdout);
  std::fputs(rjg::config::reference_markdown().c_str(), stdout);
  std::fputs(rjg::config::kReferenceEnd, stdout);
  return 0;
}
