// firedrill: the learner's, instructor's and proctor's command line.
#include <signal.h>

#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv, argv + argc);
  return firedrill::cli::RunCli(args, std::cout, std::cerr);
}
