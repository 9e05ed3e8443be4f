#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/common.hpp"
#include "cli/coverage.hpp"
#include "sim/core/error.hpp"
#include "sim/core/report.hpp"
#include "sim/io/output.hpp"
#include "sim/io/yaml_reader.hpp"
#include "sim/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "parmsim: predict and measure MoE layer times under DeepSpeed-MoE and the Parm schedules S1/S2.\n"
      "Run `parmsim COMMAND --help` for a command's options."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(parmsim::kVersion));
  bool help_config = false;
  app.add_flag("--help-config", help_config, "print every key of every input file format, then exit");
  app.allow_extras(false);
  parmsim::cli::install_mpi();
  parmsim::cli::add_subcommands(app);
  parmsim::cli::add_validate(app);
  try {
    // --help-config needs no subcommand.
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]) == "--help-config") {
        std::fputs(parmsim::help_config().c_str(), stdout);
        return 0;
      }
    // A first word that is no command: say so, and list the commands.
    if (argc > 1 && argv[1][0] != '-') {
      bool known = false;
      std::string names;
      for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
        known = known || sub->get_name() == argv[1];
        names += (names.empty() ? "" : ", ") + sub->get_name();
      }
      if (!known) {
        std::fprintf(stderr, "parmsim: error: unknown command '%s'; commands: %s (parmsim --help)\n", argv[1],
                     names.c_str());
        return 1;
      }
    }
    // A command's output files appear together when it succeeds, or not at all.
    parmsim::OutputBatch outputs;
    app.parse(argc, argv);
    parmsim::cli::coverage_finish(app);  // what a --calibration covered
    outputs.commit();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const parmsim::ReportedElsewhere&) {
    return 1;  // MPI rank 0 prints the reason
  } catch (const parmsim::UserError& e) {
    std::fputs(parmsim::error_lines(false, e.what()).c_str(), stderr);
    return 1;
  } catch (const std::exception& e) {
    // parmsim's own invariant (InternalError) or a library's exception that no
    // check turned into a UserError: either is a bug to report.
    std::fputs(parmsim::error_lines(true, e.what()).c_str(), stderr);
    return 3;
  }
  return 0;
}
