// Argument errors in the project's words: CLI11's parse errors ("--search: fast not in
// {auto,exhaustive,heuristic}") rewritten to name the command and the flag, say what it accepts
// and show an example, with the nearest flag for an unknown one.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace wallfacer::cli {

// The message for `error`, raised while parsing `app`'s command line (several lines, ending in a
// newline).
std::string describe_parse_error(const CLI::App& app, const CLI::ParseError& error);

}  // namespace wallfacer::cli
