// The empty program of benchmarks/compile_time: what including dax costs alone.
#include <dax/dax.hpp>

int main() {}
