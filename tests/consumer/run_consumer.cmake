# Installs dax into a scratch prefix, configures and builds tests/consumer against it, and runs
# the result on 2 ranks. Invoked by ctest with SOURCE_DIR, WORK_DIR and MPIEXEC.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message("${out}")
endfunction()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/dax -DDAX_BUILD_TESTS=OFF -DDAX_BUILD_EXAMPLES=OFF
    -DDAX_BUILD_BENCHMARKS=OFF -DDAX_ENABLE_CUDA=OFF -DCMAKE_INSTALL_PREFIX=${prefix})
run(${CMAKE_COMMAND} --install ${WORK_DIR}/dax)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/consumer -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
run(${MPIEXEC} -n 2 --oversubscribe ${WORK_DIR}/consumer/consumer)

# The same project taking dax with add_subdirectory (dax's tests, examples and benchmarks stay off).
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/consumer_subdir -DDAX_SOURCE=${SOURCE_DIR}
    -DDAX_ENABLE_CUDA=OFF)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer_subdir)
run(${MPIEXEC} -n 2 --oversubscribe ${WORK_DIR}/consumer_subdir/consumer)
