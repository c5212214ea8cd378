// rlx: the command-line program. Subcommands are registered in commands.cpp.
#include <cstdio>

int main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  std::puts("rlx");
  return 0;
}
