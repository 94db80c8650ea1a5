// Writing output files (plans, traces, arrays) so that a failure never leaves a broken file where
// a good one was: the data goes to a temporary file in the same directory, is flushed and
// fsynced, and only then renamed over the target. A full disk, a failed write or a kill midway
// leaves the previous file as it was. Targets that are not regular files (/dev/stdout, a pipe,
// /dev/full) are written in place, and every write, flush and close is checked. SIGINT (Ctrl-C)
// or SIGTERM during a write removes the temporary file before the signal takes its course.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace wallfacer {

// Calls `write` with a stream to `path`'s replacement and commits it; InputError naming `path`
// and the system's reason when any step fails (the temporary file is then removed).
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);

// Throws the InputError write_file_atomically would throw for `path` when its directory is missing
// or not writable: a command checks its output paths before a long search or simulation rather
// than after it. An existing target that is not a regular file (/dev/stdout) passes.
void check_file_writable(const std::string& path);

}  // namespace wallfacer
