#include <exception>
#include <iostream>

#include "cli/commands.h"

int main(int argc, char** argv) {
  try {
    return tailor::cli::run_tailor(tailor::cli::Argv(argv + 1, argv + argc), {std::cout, std::cerr});
  } catch (const std::exception& e) {
    // Libraries report through Status; this is the last guard against a bug.
    std::cerr << "tailor: internal error: " << e.what() << "\n";
    return 70;
  }
}
