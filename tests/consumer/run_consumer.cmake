# Installs dax (from BINARY_DIR, the build tree) into a scratch prefix, configures and builds tests/consumer against it, and runs
# the result on 2 ranks. Invoked by ctest with SOURCE_DIR, WORK_DIR and MPIEXEC.
# It also checks what dax::dax brings by default: OpenBLAS, one thread per rank unless
# OPENBLAS_NUM_THREADS says otherwise, and Eigen's own GEMM with DAX_USE_BLAS=OFF.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message("${out}")
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
# Fails unless the last run printed `regex`.
function(expect regex what)
  if(NOT last_output MATCHES "${regex}")
    message(FATAL_ERROR "${what}: expected output matching '${regex}', got:\n${last_output}")
  endif()
endfunction()

# The thread count must come from dax's default, not from the test's environment, nor from a
# binding of each rank to one core (which OpenBLAS would follow by itself): --bind-to none.
unset(ENV{OPENBLAS_NUM_THREADS})
unset(ENV{GOTO_NUM_THREADS})
unset(ENV{OMP_NUM_THREADS})
set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)

# The package installed from the build tree running this test: its compiled library is built already.
run(${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${prefix})
# A user's build is quiet: g++ -O2 -Wall -Wextra with -Werror (docs/building.md#warnings).
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/consumer -DCMAKE_PREFIX_PATH=${prefix}
    "-DCMAKE_CXX_FLAGS=-O2 -Wall -Wextra -Werror")
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run(${MPIEXEC} -n 2 --oversubscribe --bind-to none ${WORK_DIR}/consumer/consumer)
expect("consumer ok" "installed package")
expect("blas: OpenBLAS threads=1 config=OpenBLAS" "installed package, default BLAS")
# The user's own OpenBLAS setting wins over dax's default (OpenBLAS caps it at the core count).
cmake_host_system_information(RESULT cores QUERY NUMBER_OF_LOGICAL_CORES)
if(cores GREATER_EQUAL 2)
  run(${MPIEXEC} -n 2 --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=2 ${WORK_DIR}/consumer/consumer)
  expect("blas: OpenBLAS threads=2 " "installed package, OPENBLAS_NUM_THREADS=2")
endif()

# DAX_USE_BLAS=OFF in the consumer project: the installed config leaves BLAS out. This build also
# takes the installed precompiled-header target, dax::dax_pch.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/consumer_noblas -DCMAKE_PREFIX_PATH=${prefix}
    -DDAX_USE_BLAS=OFF -DCONSUMER_PCH=ON)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer_noblas)
run(${MPIEXEC} -n 2 --oversubscribe --bind-to none ${WORK_DIR}/consumer_noblas/consumer)
expect("blas: none threads=1 config=\n" "installed package, DAX_USE_BLAS=OFF")

# The same project taking dax with add_subdirectory (dax's tests, examples and benchmarks stay off),
# header-only (DAX_HEADER_ONLY=ON): compiling dax's library once more here would cost CI minutes,
# and dax's own build takes dax::dax compiled the add_subdirectory way already.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/consumer_subdir -DDAX_SOURCE=${SOURCE_DIR}
    -DDAX_ENABLE_CUDA=OFF -DDAX_HEADER_ONLY=ON)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer_subdir)
run(${MPIEXEC} -n 2 --oversubscribe --bind-to none ${WORK_DIR}/consumer_subdir/consumer)
expect("blas: OpenBLAS threads=1 config=OpenBLAS" "add_subdirectory, default BLAS")

# Header-only use with no CMake at all (docs/building.md): the README's one compiler line, then a
# run on 2 ranks.
find_program(MPICXX mpicxx REQUIRED)
run(${MPICXX} -std=c++20 -O0 -I${SOURCE_DIR}/include -I/usr/include/eigen3 ${SOURCE_DIR}/tests/consumer/main.cpp
    -o ${WORK_DIR}/consumer_header_only)
run(${MPIEXEC} -n 2 --oversubscribe --bind-to none ${WORK_DIR}/consumer_header_only)
expect("consumer ok" "header-only, mpicxx -I include")
