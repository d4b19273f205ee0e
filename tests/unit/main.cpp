// The runner of the pure tests (Catch itself: tests/common/catch_runner.cpp).
#include "../common/catch_runner.hpp"

int main(int argc, char** argv) { return dax::test::run_catch(argc, argv); }
