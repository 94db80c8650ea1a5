// Ctrl-C (SIGINT) during a long command: the process stops at once with one line on stderr,
// "wallfacer plan: interrupted (Ctrl-C) while pricing orders 12/84 candidates; nothing
// written", and exit status 130 (128 + SIGINT, what shells report). Nothing is left half
// written: outputs are written at the end through write_file_atomically, whose own handler
// removes a temporary file being written and then hands the signal on to this one. Buffered
// standard output is dropped, so a table is either printed whole or not at all.
#pragma once

#include <cstddef>

namespace wallfacer::cli {

// Installs the handler (once, at start-up).
void stop_cleanly_on_interrupt();
// The command that runs, and what it leaves when interrupted ("nothing written"); static strings.
void set_interrupt_context(const char* command, const char* outcome);
// Where a long search is, for the message (called from its progress callback; lock-free).
void set_interrupt_progress(const char* stage, size_t done, size_t total);

}  // namespace wallfacer::cli
