#include "cli/commands.hpp"

namespace wallfacer::cli {
int& exit_code() {
  static int code = 0;
  return code;
}
}  // namespace wallfacer::cli
