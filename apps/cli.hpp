#pragma once
// Command-line parsing shared by the rkv roles: one place decides the exit
// codes (0 after --help, 2 for bad flags, with CLI11's message).
#include <CLI/CLI.hpp>

#include <optional>

namespace rkv::apps {

// Parses argv into `app`. nullopt: go on; otherwise the status to exit with.
inline std::optional<int> parse_cli(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  return std::nullopt;
}

}  // namespace rkv::apps
