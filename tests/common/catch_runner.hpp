// The test programs' runners, compiled once (tests/common/catch_runner.cpp, the one copy of Catch's
// implementation that every test program links): the programs' main functions call these.
#pragma once

#include <string>

namespace dax::test {

/// Catch on this process alone (the pure tests): Catch's exit status.
int run_catch(int argc, char** argv);

/// Catch on every rank under a heading that names the rank, and one exit status for all ranks
/// (non-zero everywhere if any rank failed). MPI must be initialized (a dax::Runtime is alive).
int run_catch_on_every_rank(int argc, char** argv, const std::string& heading);

}  // namespace dax::test
